//! The model-based store properties, shared by every store's tests: random
//! sequences of store operations run against the stores a test binary
//! gives ([`Stores`]) and a naive reference model that keeps every spend row
//! forever and sums windows from scratch, and keeps every server's decisions
//! within the same bound, evicting in the documented order. The stores prune
//! rows and keep running totals; any drift between them and the model is a
//! bug. A second property steps the clock back and forth arbitrarily: the
//! stores must never admit what the unpruned model would refuse, and must
//! agree with each other exactly.
//!
//! Included with `#[path]` by `runtime/tests/store_model.rs` (memory and
//! SQLite) and `runtime/postgres/tests/store_model.rs` (memory and
//! PostgreSQL).

use std::collections::HashMap;

use mcpolicy_runtime::store::{
    Admission, CounterUsage, DecisionFilter, DecisionKey, Evaluation, LimitCheck, LimitWindow,
    Millis, Reservation, ServerStats, StoreAdmin, StoredDecision, StoredEntry, Verdict,
};
use proptest::prelude::*;

/// The stores under test, each opened fresh (in `dir` if it needs a file)
/// with [`BOUND`] decisions per server, named for messages.
pub type Stores = fn(&tempfile::TempDir) -> Vec<(&'static str, Box<dyn StoreAdmin>)>;

#[derive(Debug, Clone)]
pub enum Op {
    /// Advance the clock.
    Wait(u32),
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
        recomputable: bool,
        /// A policy's decision (`policy.budget_exhausted`, a denial), not
        /// the user's answer: it may not replace a user's answer in force.
        policy: bool,
    },
    /// Compare a server's stored/evicted counts.
    Stats {
        server: u8,
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
    /// `replay_or_admit` as the engine calls it: admit unless a stored
    /// denial answers.
    ReplayOrAdmit {
        server: u8,
        id: u8,
        /// The approval key probed after the refusal key `id`, if any.
        approval: Option<u8>,
        digest: u8,
        mask: u8,
        tokens: u16,
    },
    /// `StoreAdmin::decisions` with a filter.
    Decisions(Filter),
    /// `StoreAdmin::forget` with a filter.
    Forget(Filter),
    /// `StoreAdmin::usage` of each check `mask` selects.
    Usage {
        server: u8,
        mask: u8,
        tokens: u16,
    },
    /// `StoreAdmin::prune_expired`.
    PruneExpired,
    /// `StoreAdmin::size`.
    Size,
    /// `StoreAdmin::servers`.
    Servers,
}

/// A [`DecisionFilter`] over the test's servers, identities, reasons and verdicts.
#[derive(Debug, Clone)]
pub struct Filter {
    server: Option<u8>,
    id: Option<u8>,
    denial_reason: Option<bool>,
    deny: Option<bool>,
}

impl Filter {
    fn to_filter(&self) -> DecisionFilter {
        DecisionFilter {
            server_id: self.server.map(|s| SERVERS[usize::from(s)].to_owned()),
            identity: self.id.map(|id| format!("i{id}")),
            reason: self
                .denial_reason
                .map(|deny| if deny { "user.denied" } else { "user.approved" }.to_owned()),
            verdict: self
                .deny
                .map(|deny| if deny { Verdict::Deny } else { Verdict::Allow }),
        }
    }
}

fn filter() -> impl Strategy<Value = Filter> {
    (
        proptest::option::of(0u8..2),
        proptest::option::of(0u8..6),
        proptest::option::of(any::<bool>()),
        proptest::option::of(any::<bool>()),
    )
        .prop_map(|(server, id, denial_reason, deny)| Filter {
            server,
            id,
            denial_reason,
            deny,
        })
}

pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u32..700).prop_map(Op::Wait),
        // Past the retention (a minute at least): pruning has work to do.
        1 => (50_000u32..150_000).prop_map(Op::Wait),
        6 => (0u8..2, 1u8..8, 0u16..60).prop_map(|(server, mask, tokens)| Op::Admit { server, mask, tokens }),
        2 => (0u8..16, 0u16..90).prop_map(|(nth, actual)| Op::Settle { nth, actual }),
        3 => (0u8..2, 0u8..6, 0u8..2, proptest::option::of(0u16..2_000), any::<bool>(), any::<bool>(), any::<bool>())
            .prop_map(|(server, id, digest, ttl, deny, recomputable, policy)| Op::Record { server, id, digest, ttl, deny, recomputable, policy }),
        1 => (0u8..2).prop_map(|server| Op::Stats { server }),
        2 => (0u8..2, 0u8..6, 0u8..2).prop_map(|(server, id, digest)| Op::Replay { server, id, digest }),
        1 => (0u8..2, 0u8..6).prop_map(|(server, id)| Op::Get { server, id }),
        1 => (0u8..2, 0u8..2).prop_map(|(server, digest)| Op::Purge { server, digest }),
        4 => (0u8..2, 0u8..6, proptest::option::of(0u8..6), 0u8..2, 1u8..8, 0u16..60).prop_map(|(server, id, approval, digest, mask, tokens)| {
            Op::ReplayOrAdmit { server, id, approval, digest, mask, tokens }
        }),
        1 => filter().prop_map(Op::Decisions),
        1 => filter().prop_map(Op::Forget),
        2 => (0u8..2, 1u8..8, 0u16..120).prop_map(|(server, mask, tokens)| Op::Usage { server, mask, tokens }),
        1 => Just(Op::PruneExpired),
        1 => Just(Op::Size),
        1 => Just(Op::Servers),
    ]
}

const SERVERS: [&str; 2] = ["alpha", "beta"];

/// Whether `check` fits a window that holds `spent`: its amount, and room
/// for at least 1, so that an exhausted window refuses an amount of 0
/// (`docs/spec/store.md`, "Expiry, windows and reservations").
fn fits(spent: u64, check: &LimitCheck) -> bool {
    spent + check.amount.max(1) <= check.limit
}

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

/// The bound of decisions per server the stores and the model keep: six
/// identities per server, so evictions happen.
pub const BOUND: u64 = 4;

/// The reference: every spend row ever recorded, a plain map of decisions,
/// and each server's counts.
#[derive(Default)]
struct Model {
    rows: Vec<(String, String, Millis, u64, usize)>, // server, counter, at, amount, admission
    decisions: HashMap<DecisionKey, StoredDecision>,
    stats: HashMap<String, ServerStats>,
    /// Servers an admission with checks was asked for, admitted or not:
    /// their counters exist from then on.
    counted: std::collections::BTreeSet<String>,
}

impl Model {
    /// Stores a decision and evicts past [`BOUND`]: recomputable first, then
    /// soonest expiry (none last), then oldest, then identity (STORE.md).
    fn record(&mut self, key: DecisionKey, decision: StoredDecision) {
        // A user's answer in force is replaced by another answer of the
        // user's only (`docs/spec/store.md`, "What a later decision may replace").
        let users = |d: &StoredDecision| d.reason.starts_with("user.");
        if let Some(old) = self.decisions.get(&key)
            && users(old)
            && !users(&decision)
            && old.digest == decision.digest
            && old.expires_at.is_none_or(|at| decision.decided_at < at)
        {
            return;
        }
        let server = key.server_id.clone();
        let new = self.decisions.insert(key, decision).is_none();
        let stats = self.stats.entry(server.clone()).or_default();
        if new {
            stats.stored += 1;
        }
        while stats.stored > BOUND {
            let victim = self
                .decisions
                .iter()
                .filter(|(k, _)| k.server_id == server)
                .min_by_key(|(k, d)| {
                    (
                        !d.recomputable,
                        d.expires_at.unwrap_or(Millis::MAX),
                        d.decided_at,
                        k.identity.clone(),
                    )
                })
                .map(|(k, _)| k.clone())
                .expect("a server over its bound has decisions");
            let gone = self.decisions.remove(&victim).expect("present");
            stats.stored -= 1;
            stats.evicted += 1;
            stats.evicted_represented += gone.represented;
        }
    }

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

    /// What `usage` must answer: the window's spend, and when `amount`
    /// more fits (computed from every row ever recorded).
    fn usage(&self, server: &str, check: &LimitCheck, now: Millis) -> CounterUsage {
        let spent = self.spent(server, check, now);
        CounterUsage {
            spent,
            available_at: (!fits(spent, check)).then(|| self.available_at(server, check, now)),
        }
    }

    /// The decisions `filter` selects, ordered by key.
    fn select(&self, filter: &DecisionFilter) -> Vec<StoredEntry> {
        let mut found: Vec<StoredEntry> = self
            .decisions
            .iter()
            .filter(|(k, d)| filter.matches(k, d))
            .map(|(k, d)| StoredEntry {
                key: k.clone(),
                decision: d.clone(),
            })
            .collect();
        found.sort_by(|a, b| {
            (&a.key.server_id, &a.key.identity).cmp(&(&b.key.server_id, &b.key.identity))
        });
        found
    }

    /// Removes the decisions `filter` selects, as `forget` must.
    fn remove(&mut self, filter: &DecisionFilter) -> Vec<StoredEntry> {
        let gone = self.select(filter);
        for entry in &gone {
            self.decisions.remove(&entry.key);
            if let Some(stats) = self.stats.get_mut(&entry.key.server_id) {
                stats.stored -= 1;
            }
        }
        gone
    }

    /// When a refused `check` would fit.
    fn available_at(&self, server: &str, check: &LimitCheck, now: Millis) -> Millis {
        match check.window {
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
                        .find(|&t| fits(self.spent(server, check, t), check))
                        .unwrap_or(now)
                }
            }
        }
    }

    fn admit(
        &mut self,
        server: &str,
        checks: &[LimitCheck],
        now: Millis,
        admission: usize,
    ) -> Admission {
        if !checks.is_empty() {
            self.counted.insert(server.to_owned());
        }
        for (index, check) in checks.iter().enumerate() {
            if fits(self.spent(server, check, now), check) {
                continue;
            }
            let available_at = self.available_at(server, check, now);
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

pub fn run(ops: Vec<Op>, stores: Stores) {
    let dir = tempfile::tempdir().expect("tempdir");
    let stores = stores(&dir);
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
                recomputable,
                policy,
            } => {
                let key = DecisionKey::new(SERVERS[usize::from(server)], format!("i{id}"));
                let decision = StoredDecision {
                    verdict: if deny || policy {
                        Verdict::Deny
                    } else {
                        Verdict::Allow
                    },
                    reason: match (policy, deny) {
                        (true, _) => "policy.budget_exhausted",
                        (false, true) => "user.denied",
                        (false, false) => "user.approved",
                    }
                    .into(),
                    digest: format!("d{digest}").into(),
                    expires_at: ttl.map(|t| now + Millis::from(t)),
                    data: deny.then(|| format!("{{\"step\":{step}}}").into()),
                    represented: 0,
                    decided_at: now,
                    recomputable: deny && recomputable,
                    statement: (id % 2 == 0).then(|| "budget:1".into()),
                };
                model.record(key.clone(), decision.clone());
                for (_, store) in &stores {
                    store.record(&key, &decision).expect("record");
                }
            }
            Op::Stats { server } => {
                let server = SERVERS[usize::from(server)];
                let expected = model.stats.get(server).copied().unwrap_or_default();
                assert!(expected.stored <= BOUND);
                for (name, store) in &stores {
                    let got = store.server_stats(server).expect("stats");
                    assert_eq!(got, expected, "{name} stats at step {step}");
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
            Op::ReplayOrAdmit {
                server,
                id,
                approval,
                digest,
                mask,
                tokens,
            } => {
                let server = SERVERS[usize::from(server)];
                let key = DecisionKey::new(server, format!("i{id}"));
                let approval = approval.map(|a| format!("i{a}"));
                let digest = format!("d{digest}");
                let wanted = checks(mask, tokens, now);
                // The refusal key answers with a denial, then the approval
                // key with an approval (`docs/spec/store.md`, "The atomic decision").
                let mut probe =
                    |key: &DecisionKey, verdict: Verdict| match model.decisions.get_mut(key) {
                        Some(d)
                            if *d.digest == *digest
                                && d.expires_at.is_none_or(|at| now < at)
                                && d.verdict == verdict =>
                        {
                            d.represented += 1;
                            Some(d.clone())
                        }
                        _ => None,
                    };
                let expected_replay = probe(&key, Verdict::Deny).or_else(|| {
                    approval
                        .as_ref()
                        .and_then(|a| probe(&DecisionKey::new(server, a.as_str()), Verdict::Allow))
                });
                let go = |stored: Option<&StoredDecision>| !matches!(stored, Some(d) if d.verdict == Verdict::Deny);
                let expected_admission =
                    go(expected_replay.as_ref()).then(|| model.admit(server, &wanted, now, step));
                let mut handles = Vec::new();
                for (name, store) in &stores {
                    let mut buffer = Vec::new();
                    let mut evaluate =
                        |stored: Option<&StoredDecision>, out: &mut Vec<LimitCheck>| {
                            if go(stored) {
                                out.extend(wanted.iter().cloned());
                                Evaluation::Admit
                            } else {
                                Evaluation::Answered
                            }
                        };
                    let answer = store
                        .replay_or_admit(
                            &key,
                            approval.as_deref(),
                            &digest,
                            now,
                            &mut buffer,
                            &mut evaluate,
                        )
                        .expect("replay_or_admit");
                    let (replayed, admission) = (answer.replayed, answer.admission);
                    assert_eq!(
                        replayed, expected_replay,
                        "{name} replay_or_admit (replay) at step {step}"
                    );
                    match (&expected_admission, &admission) {
                        (
                            Some(Admission::Admitted { .. }),
                            Some(Admission::Admitted { reservation }),
                        ) => handles.push(*reservation),
                        _ => assert_eq!(
                            admission, expected_admission,
                            "{name} replay_or_admit (admit) at step {step}"
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
            Op::Decisions(filter) => {
                let filter = filter.to_filter();
                let expected = model.select(&filter);
                for (name, store) in &stores {
                    let got = store.decisions(&filter).expect("decisions");
                    assert_eq!(got, expected, "{name} decisions at step {step}");
                }
            }
            Op::Forget(filter) => {
                let filter = filter.to_filter();
                let expected = model.remove(&filter);
                for (name, store) in &stores {
                    let got = store.forget(&filter).expect("forget");
                    assert_eq!(got, expected, "{name} forget at step {step}");
                    assert!(store.decisions(&filter).expect("decisions").is_empty());
                }
            }
            Op::Usage {
                server,
                mask,
                tokens,
            } => {
                let server = SERVERS[usize::from(server)];
                for check in checks(mask, tokens, now) {
                    let expected = model.usage(server, &check, now);
                    for (name, store) in &stores {
                        let got = store.usage(server, &check, now).expect("usage");
                        assert_eq!(
                            got, expected,
                            "{name} usage of {} at step {step}",
                            check.counter
                        );
                    }
                }
            }
            Op::PruneExpired => {
                let expired = model.remove(&DecisionFilter::default());
                // `remove` took everything: put back what has not expired.
                let mut gone = 0u64;
                for entry in expired {
                    if entry.decision.is_expired(now) {
                        gone += 1;
                    } else {
                        model.decisions.insert(entry.key.clone(), entry.decision);
                        if let Some(stats) = model.stats.get_mut(&entry.key.server_id) {
                            stats.stored += 1;
                        }
                    }
                }
                let mut spend = Vec::new();
                for (name, store) in &stores {
                    let got = store.prune_expired(now).expect("prune");
                    assert_eq!(got.decisions, gone, "{name} prune at step {step}");
                    spend.push(got.spend_rows);
                }
                assert!(
                    spend.windows(2).all(|w| w[0] == w[1]),
                    "stores pruned different spend at step {step}: {spend:?}"
                );
            }
            Op::Size => {
                let mut rows = Vec::new();
                for (name, store) in &stores {
                    let got = store.size().expect("size");
                    assert_eq!(
                        got.decisions,
                        model.decisions.len() as u64,
                        "{name} size at step {step}"
                    );
                    assert!(got.spend_rows <= model.rows.len() as u64);
                    rows.push(got.spend_rows);
                }
                assert!(
                    rows.windows(2).all(|w| w[0] == w[1]),
                    "stores hold different spend at step {step}: {rows:?}"
                );
            }
            Op::Servers => {
                // A server with a decision, a tally or spend, each once, sorted.
                let mut expected: Vec<String> = model
                    .decisions
                    .keys()
                    .map(|k| k.server_id.clone())
                    .chain(model.stats.keys().cloned())
                    .chain(model.counted.iter().cloned())
                    .collect();
                expected.sort();
                expected.dedup();
                for (name, store) in &stores {
                    let got = store.servers().expect("servers");
                    assert_eq!(got, expected, "{name} servers at step {step}");
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
                if let Some(stats) = model.stats.get_mut(server) {
                    stats.stored -= removed;
                }
                for (name, store) in &stores {
                    let got = store.purge_stale(server, &digest, now).expect("purge");
                    assert_eq!(got, removed, "{name} purge at step {step}");
                }
            }
        }
    }
    assert_sound(&stores, "the run");
}

/// `StoreAdmin::check_integrity` finds nothing in a store only ever used
/// through its own API: the schema's invariants hold after any history.
pub fn assert_sound(stores: &[(&'static str, Box<dyn StoreAdmin>)], after: &str) {
    for (name, store) in stores {
        let integrity = store.check_integrity().expect("check_integrity");
        assert!(
            integrity.is_sound(),
            "{name} after {after}: {:?}",
            integrity.findings
        );
        assert!(!integrity.checks.is_empty(), "{name}");
    }
}

/// `cases` unless `PROPTEST_CASES` says otherwise (the long mode).
pub fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

/// A record in the eviction property: identity, recomputable, ttl.
pub type Flood = Vec<(u8, bool, Option<u16>)>;

/// Records `flood` into both stores (bound [`BOUND`] per server) and checks
/// after each: the server holds at most the bound; what disappeared is what
/// `server_stats` counts as evicted; a decision the policy cannot recompute
/// is evicted only when no recomputable one is left; among those, one
/// without expiry only when none with an expiry is left.
pub fn run_flood(flood: Flood, stores: Stores) {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, store) in stores(&dir) {
        let mut present: HashMap<u8, StoredDecision> = HashMap::new();
        for (step, (id, recomputable, ttl)) in flood.iter().copied().enumerate() {
            let now = 1_000 + step as Millis;
            let key = |id: u8| DecisionKey::new("alpha", format!("i{id:03}"));
            let decision = StoredDecision {
                verdict: Verdict::Deny,
                reason: "r".into(),
                digest: "d".into(),
                expires_at: ttl.map(|t| now + 10_000 + Millis::from(t)),
                data: None,
                represented: 0,
                decided_at: now,
                recomputable,
                statement: None,
            };
            let before = store.server_stats("alpha").expect("stats");
            store.record(&key(id), &decision).expect("record");
            present.insert(id, decision);
            let mut gone = Vec::new();
            present.retain(|id, d| {
                let kept = store.get(&key(*id)).expect("get").is_some();
                if !kept {
                    gone.push(d.clone());
                }
                kept
            });
            let after = store.server_stats("alpha").expect("stats");
            assert!(after.stored <= BOUND, "{name} step {step}: {after:?}");
            assert_eq!(after.stored, present.len() as u64, "{name} step {step}");
            assert_eq!(
                after.evicted - before.evicted,
                gone.len() as u64,
                "{name} step {step}"
            );
            for evicted in &gone {
                if !evicted.recomputable {
                    assert!(
                        present.values().all(|d| !d.recomputable),
                        "{name} step {step}: evicted a remembered decision before a recomputable one"
                    );
                    if evicted.expires_at.is_none() {
                        assert!(
                            present.values().all(|d| d.expires_at.is_none()),
                            "{name} step {step}: evicted a decision without expiry before one with"
                        );
                    }
                }
            }
        }
    }
}

#[derive(Debug, Clone)]
pub enum StepOp {
    /// Move the clock by this many ms (negative: a step back).
    Step(i64),
    Admit {
        server: u8,
        mask: u8,
        tokens: u16,
    },
    Settle {
        nth: u8,
        actual: u16,
    },
    /// `StoreAdmin::prune_expired` at the current time.
    Prune,
    /// `StoreAdmin::usage` of each check `mask` selects.
    Usage {
        server: u8,
        mask: u8,
        tokens: u16,
    },
}

pub fn step_op() -> impl Strategy<Value = StepOp> {
    const DAY: i64 = 86_400_000;
    prop_oneof![
        3 => (-3_000i64..3_000).prop_map(StepOp::Step),
        2 => (-200_000i64..200_000).prop_map(StepOp::Step),
        1 => (-3 * DAY..3 * DAY).prop_map(StepOp::Step),
        8 => (0u8..2, 1u8..16, 0u16..60).prop_map(|(server, mask, tokens)| StepOp::Admit { server, mask, tokens }),
        2 => (0u8..16, 0u16..90).prop_map(|(nth, actual)| StepOp::Settle { nth, actual }),
        1 => Just(StepOp::Prune),
        2 => (0u8..2, 1u8..16, 0u16..60).prop_map(|(server, mask, tokens)| StepOp::Usage { server, mask, tokens }),
    ]
}

/// [`checks`], and a fourth: `budget 4 requests per day` (bit 3).
fn step_checks(mask: u8, tokens: u16, now: Millis) -> Vec<LimitCheck> {
    let mut all = checks(mask & 7, tokens, now);
    if mask & 8 != 0 {
        let day: Millis = 86_400_000;
        let start = now - now.rem_euclid(day);
        all.push(LimitCheck {
            counter: "budget:requests:day".into(),
            amount: 1,
            limit: 4,
            window: LimitWindow::Fixed {
                start,
                end: start + day,
            },
        });
    }
    all
}

pub fn run_steps(ops: Vec<StepOp>, stores: Stores) {
    let dir = tempfile::tempdir().expect("tempdir");
    let stores = stores(&dir);
    // The model records exactly what the stores admitted, and never prunes.
    let mut model = Model::default();
    let mut admitted: Vec<(usize, &str, Vec<Reservation>)> = Vec::new();
    let mut now: Millis = 1_773_144_000_000; // 2026-03-10T12:00:00Z
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            StepOp::Step(ms) => now += ms,
            StepOp::Admit {
                server,
                mask,
                tokens,
            } => {
                let server = SERVERS[usize::from(server)];
                let checks = step_checks(mask, tokens, now);
                let answers: Vec<Admission> = stores
                    .iter()
                    .map(|(_, store)| store.admit(server, &checks, now).expect("admit"))
                    .collect();
                // Memory and SQLite answer alike (reservation ids aside).
                let strip = |a: &Admission| match a {
                    Admission::Admitted { .. } => None,
                    refused => Some(refused.clone()),
                };
                for (answer, (name, _)) in answers.iter().zip(&stores) {
                    assert_eq!(strip(answer), strip(&answers[0]), "{name} at step {step}");
                }
                let would = model.admit(server, &checks, now, step);
                match &answers[0] {
                    Admission::Admitted { .. } => {
                        assert!(
                            matches!(would, Admission::Admitted { .. }),
                            "admitted at step {step} ({now}) what an unpruned store refuses: {would:?}"
                        );
                        let handles = answers
                            .iter()
                            .map(|a| match a {
                                Admission::Admitted { reservation } => *reservation,
                                Admission::Refused { .. } => unreachable!(),
                            })
                            .collect();
                        admitted.push((step, server, handles));
                    }
                    Admission::Refused { .. } => {
                        // Refusing what the model admits is allowed (fail
                        // closed); undo the model's recording.
                        model.rows.retain(|row| row.4 != step);
                    }
                }
            }
            StepOp::Settle { nth, actual } => {
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
            // Pruning, then any step back: later admissions are still held
            // to the unpruned model above.
            StepOp::Prune => {
                let pruned: Vec<_> = stores
                    .iter()
                    .map(|(_, store)| store.prune_expired(now).expect("prune"))
                    .collect();
                assert!(
                    pruned.windows(2).all(|w| w[0] == w[1]),
                    "stores pruned differently at step {step}: {pruned:?}"
                );
            }
            StepOp::Usage {
                server,
                mask,
                tokens,
            } => {
                let server = SERVERS[usize::from(server)];
                for check in step_checks(mask, tokens, now) {
                    let usage: Vec<_> = stores
                        .iter()
                        .map(|(_, store)| store.usage(server, &check, now).expect("usage"))
                        .collect();
                    assert!(
                        usage.windows(2).all(|w| w[0] == w[1]),
                        "stores disagree on {} at step {step}: {usage:?}",
                        check.counter
                    );
                    // Never "fits" where an unpruned store would refuse.
                    if usage[0].available_at.is_none() {
                        let would = model.usage(server, &check, now);
                        assert!(
                            would.available_at.is_none(),
                            "{} fits at step {step} ({now}) in the stores, not in the model: {would:?}",
                            check.counter
                        );
                    }
                }
            }
        }
    }
    assert_sound(&stores, "the steps");
}
