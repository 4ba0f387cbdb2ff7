//! The retry-loop alert (`docs/spec/evaluation.md`, "Alerts") against a
//! small reference model, over random sequences of requests (a few
//! identities, so they are replayed), clock steps, engine clones and a
//! second engine sharing the store (another process of the fleet, whose
//! replays raise the store's `represented` behind this engine's back).
//!
//! The model: each identity has tumbling windows; one begins at the first
//! re-presentation after the previous one ended and lasts `window_ms`; the
//! count of a window is the rise of the store's `represented` since just
//! before it began; an alert is raised when that count first exceeds the
//! threshold within the window, by the engine whose decision saw it, once.
//! Fast by default; long mode: `PROPTEST_CASES=20000 cargo test -p
//! mcpolicy-runtime --test alerts`.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod engine_support;

use std::collections::HashMap;

use engine_support::*;
use mcpolicy_runtime::alert::{self, Alert};
use mcpolicy_runtime::clock::Clock;
use mcpolicy_runtime::engine::Decision;
use mcpolicy_runtime::table::{RetryAlert, Switch, block_digest, builtin};
use proptest::prelude::*;

const THRESHOLD: u64 = 3;
const WINDOW_MS: u64 = 10_000;

fn closed_block(alert: Option<RetryAlert>) -> mcpolicy_runtime::table::EffectiveBlock {
    let mut block = open_block();
    block.sampling = Switch {
        enabled: false,
        reason: builtin::SAMPLING_DISABLED.into(),
    };
    block.retry_alert = alert;
    block
}

#[derive(Debug, Clone)]
enum Op {
    /// Identity `i` sent to engine `engine` (0 and 1 are clones of one
    /// engine, 2 is another engine on the same store).
    Send { identity: u8, engine: u8 },
    /// The clock moves forward.
    Step(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..3, prop_oneof![3 => 0u8..2, 1 => Just(2u8)])
            .prop_map(|(identity, engine)| Op::Send { identity, engine }),
        1 => prop_oneof![1u64..3000, Just(WINDOW_MS - 1), Just(WINDOW_MS)].prop_map(Op::Step),
    ]
}

/// One tracker's view of one identity in the model.
#[derive(Debug, Clone, Copy)]
struct Window {
    since: i64,
    base: u64,
    alerted: bool,
}

/// The model of one engine's tracker: `Some(count)` when this
/// re-presentation (with the store's new count `represented`) raises.
fn model(
    windows: &mut HashMap<u8, Window>,
    identity: u8,
    represented: u64,
    now: i64,
) -> Option<u64> {
    let window = windows
        .entry(identity)
        .and_modify(|w| {
            if now >= w.since + WINDOW_MS as i64 || represented <= w.base {
                *w = Window {
                    since: now,
                    base: represented - 1,
                    alerted: false,
                };
            }
        })
        .or_insert(Window {
            since: now,
            base: represented - 1,
            alerted: false,
        });
    let count = represented - window.base;
    if count > THRESHOLD && !window.alerted {
        window.alerted = true;
        Some(count)
    } else {
        None
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(256),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Alerts are raised exactly when the model raises them, with the
    /// model's count; never twice for one identity within one window.
    #[test]
    fn once_per_identity_per_window(ops in prop::collection::vec(op(), 1..120)) {
        let setting = RetryAlert { count: THRESHOLD, window_ms: WINDOW_MS };
        let harness = Harness::new(table(vec![("s", closed_block(Some(setting)))]));
        let clone = harness.engine.clone();
        let other = harness.reload(table(vec![("s", closed_block(Some(setting)))]));
        // Per tracker: the clones share one, the other engine has its own.
        let mut models: [HashMap<u8, Window>; 2] = Default::default();
        let mut represented: HashMap<u8, u64> = HashMap::new();
        let mut raised: HashMap<(usize, u8), Vec<i64>> = HashMap::new();
        for op in ops {
            match op {
                Op::Step(ms) => { harness.clock.advance(ms as i64); }
                Op::Send { identity, engine } => {
                    let request = simple(&format!("prompt {identity}"));
                    let ctx = mcpolicy_runtime::engine::ClientContext::default();
                    let decision = match engine {
                        0 => harness.engine.decide_request("s", &request, &ctx),
                        1 => clone.decide_request("s", &request, &ctx),
                        _ => other.engine.decide_request("s", &request, &ctx),
                    }.unwrap();
                    let Decision::Deny(denial) = &decision else {
                        panic!("sampling off denies");
                    };
                    let tracker = usize::from(engine == 2);
                    let now = harness.clock.now();
                    let first = !represented.contains_key(&identity);
                    let count = represented.entry(identity).or_insert(0);
                    let expected = if first {
                        None
                    } else {
                        *count += 1;
                        prop_assert_eq!(denial.represented(), *count);
                        model(&mut models[tracker], identity, *count, now)
                    };
                    match (decision.alert(), expected) {
                        (None, None) => {}
                        (Some(Alert::RetryLoop(r)), Some(count)) => {
                            prop_assert_eq!(r.count, count);
                            prop_assert_eq!(r.threshold, THRESHOLD);
                            prop_assert_eq!(r.represented, *represented.get(&identity).unwrap());
                            prop_assert!(r.identity.starts_with("s:"));
                            let times = raised.entry((tracker, identity)).or_default();
                            // Never two within one window of one tracker.
                            if let Some(last) = times.last() {
                                prop_assert!(r.since >= last + WINDOW_MS as i64);
                            }
                            times.push(r.since);
                        }
                        (got, want) => prop_assert!(false, "alert {:?}, model {:?}", got, want),
                    }
                }
            }
        }
    }
}

/// Forty re-presentations are not a loop; the forty-first within ten
/// minutes is (the built-in setting), and the next window raises again.
#[test]
fn the_built_in_setting_is_forty_in_ten_minutes() {
    let harness = Harness::new(table(vec![("s", closed_block(None))]));
    let request = simple("again");
    harness.decide("s", &request);
    let mut alerts = Vec::new();
    for i in 1..=60u64 {
        harness.clock.advance(1000);
        if let Some(Alert::RetryLoop(r)) = harness.decide("s", &request).alert() {
            alerts.push((i, r.count, r.window_ms));
        }
    }
    assert_eq!(alerts, [(41, 41, alert::DEFAULT_WINDOW_MS)]);
    harness.clock.advance(alert::DEFAULT_WINDOW_MS as i64);
    let later: Vec<u64> = (0..45)
        .filter_map(|_| match harness.decide("s", &request).alert() {
            Some(Alert::RetryLoop(r)) => Some(r.count),
            _ => None,
        })
        .collect();
    assert_eq!(later, [41]);
}

/// `retry_alert` is left out of the digest: changing the threshold keeps
/// the stored refusals (and a block without it hashes as before).
#[test]
fn the_setting_is_not_part_of_the_digest() {
    let reasons = reasons();
    let without = block_digest(&closed_block(None), &reasons);
    for setting in [(1, 1), (40, 600_000), (7, 86_400_000)] {
        let block = closed_block(Some(RetryAlert {
            count: setting.0,
            window_ms: setting.1,
        }));
        assert_eq!(block_digest(&block, &reasons), without);
    }
    // A stored refusal survives an edit of the threshold.
    let harness = Harness::new(table(vec![("s", closed_block(None))]));
    let request = simple("kept");
    harness.decide("s", &request);
    let edited = harness.reload(table(vec![(
        "s",
        closed_block(Some(RetryAlert {
            count: 2,
            window_ms: 1000,
        })),
    )]));
    let Decision::Deny(denial) = edited.decide("s", &request) else {
        panic!("denied");
    };
    assert!(denial.replayed());
    assert_eq!(denial.represented(), 1);
}
