//! mcpolicy against Cedar (`cedar-policy` 4) and Rego (`regorus`) on the
//! same rules and the same request bytes (README.md beside this crate).
//!
//! The rules: 1,000 MCP servers, each with sampling on or off and its own
//! `max_messages`, written once as data ([`Rule`]) and then in each
//! language: an mcpolicy policy compiled by `mcpolicy-compiler`, one Cedar
//! policy over `Server` entities that carry the rules as attributes, a Rego
//! module with the rules as `data`. The requests: 13 `sampling/createMessage`
//! frames of 0.5–2 KB, as raw bytes.
//!
//! What each engine does per decision, from the bytes:
//! - mcpolicy: `Engine::decide` (strict parse and validation of the whole
//!   frame, the request identity, the decision, a memory store);
//! - Cedar: `serde_json` parse, extract the message count, build the
//!   request, `is_authorized`;
//! - Rego: `serde_json` parse, extract, build the input, `eval_rule`.
//!
//! Before timing, every (server, request) pair is decided by all three and
//! the answers must agree. Then each round times every engine over all
//! 13,000 pairs in one shuffled order (the engines' order rotates per
//! round) and prints the per-round ratios; a last table gives medians.

use std::path::PathBuf;
use std::process::Command;
use std::str::FromStr;

use cedar_policy::{
    Authorizer, Context, Entities, EntityId, EntityTypeName, EntityUid, PolicySet, Request,
    RestrictedExpression,
};
use mcpolicy_peers_alone::{
    REQUESTS, Rule, SERVERS, mcpolicy_decide, mcpolicy_engine, mcpolicy_policy, median, pairs,
    request_bytes, rules, time_per_pair,
};
use mcpolicy_runtime::engine::ClientContext;
use serde_json::Value;
use sha2::{Digest, Sha256};

const ROUNDS: usize = 7;

/// One Cedar policy over the servers' attributes (one `permit` per server
/// would be evaluated one by one: Cedar does not index policies by
/// principal, and 857 of them took ~1.7 ms per request).
const CEDAR_POLICY: &str = r#"permit(principal is Server, action == Action::"createMessage", resource)
  when { principal.sampling && context.messages <= principal.max_messages };
"#;

/// The rules as Cedar entities: a `Server` per rule with its attributes.
fn cedar_entities(rules: &[Rule]) -> Value {
    rules
        .iter()
        .map(|rule| {
            serde_json::json!({
                "uid": {"type": "Server", "id": rule.id},
                "attrs": {"sampling": rule.sampling, "max_messages": rule.max_messages},
                "parents": [],
            })
        })
        .collect()
}

const REGO_MODULE: &str = r#"package mcpolicy.peers

import rego.v1

default allow := false

allow if {
	server := data.servers[input.server]
	server.sampling
	input.messages <= server.max_messages
}
"#;

fn rego_data(rules: &[Rule]) -> Value {
    let servers: serde_json::Map<String, Value> = rules
        .iter()
        .map(|rule| {
            (
                rule.id.clone(),
                serde_json::json!({"sampling": rule.sampling, "max_messages": rule.max_messages}),
            )
        })
        .collect();
    serde_json::json!({ "servers": servers })
}

struct Cedar {
    authorizer: Authorizer,
    policies: PolicySet,
    entities: Entities,
    server_type: EntityTypeName,
    action: EntityUid,
    resource: EntityUid,
}

impl Cedar {
    fn new(rules: &[Rule]) -> Cedar {
        Cedar {
            authorizer: Authorizer::new(),
            policies: CEDAR_POLICY.parse().expect("the Cedar policy parses"),
            entities: Entities::from_json_value(cedar_entities(rules), None)
                .expect("the Cedar entities load"),
            server_type: EntityTypeName::from_str("Server").expect("a type name"),
            action: r#"Action::"createMessage""#.parse().expect("an entity uid"),
            resource: r#"Model::"any""#.parse().expect("an entity uid"),
        }
    }

    fn request(&self, server: &str, messages: i64) -> Request {
        let principal =
            EntityUid::from_type_name_and_id(self.server_type.clone(), EntityId::new(server));
        let context = Context::from_pairs([(
            "messages".to_owned(),
            RestrictedExpression::new_long(messages),
        )])
        .expect("a context");
        Request::new(
            principal,
            self.action.clone(),
            self.resource.clone(),
            context,
            None,
        )
        .expect("a request")
    }

    fn is_authorized(&self, request: &Request) -> bool {
        self.authorizer
            .is_authorized(request, &self.policies, &self.entities)
            .decision()
            == cedar_policy::Decision::Allow
    }

    fn decide(&self, server: &str, bytes: &[u8]) -> bool {
        let request = self.request(server, message_count(bytes));
        self.is_authorized(&request)
    }
}

/// What the peers extract from the bytes: `params.messages`' length.
fn message_count(bytes: &[u8]) -> i64 {
    let frame: Value = serde_json::from_slice(bytes).expect("the request parses");
    frame["params"]["messages"]
        .as_array()
        .map_or(0, |messages| messages.len() as i64)
}

fn rego_engine(rules: &[Rule]) -> regorus::Engine {
    let mut engine = regorus::Engine::new();
    engine
        .add_policy("peers.rego".into(), REGO_MODULE.into())
        .expect("the Rego module parses");
    engine
        .add_data(regorus::Value::from(rego_data(rules)))
        .expect("the Rego data loads");
    engine
}

fn rego_decide(engine: &mut regorus::Engine, server: &str, bytes: &[u8]) -> bool {
    let messages = message_count(bytes);
    let mut input = regorus::Value::new_object();
    let fields = input.as_object_mut().expect("an object");
    fields.insert("server".into(), server.into());
    fields.insert("messages".into(), messages.into());
    engine.set_input(input);
    engine
        .eval_rule("data.mcpolicy.peers.allow".into())
        .expect("the rule evaluates")
        == regorus::Value::from(true)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".into())
}

/// Builds the `mcpolicy-peers-alone` binary on its own (so that its
/// `serde_json` has mcpolicy's features, not Cedar's) with the cargo that
/// built this one; its path.
fn build_alone() -> PathBuf {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let status = Command::new(env!("CARGO"))
        .args(["build", "--release", "--manifest-path", manifest])
        .args(["-p", "mcpolicy-peers-alone"])
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building mcpolicy-peers-alone failed");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/target")));
    target.join("release/mcpolicy-peers-alone")
}

/// One round of mcpolicy's timings from its own build: ns per fresh
/// decision and per replayed denial. It must have allowed `allowed` pairs.
fn alone_round(alone: &PathBuf, allowed: usize) -> (f64, f64) {
    let output = Command::new(alone)
        .output()
        .expect("mcpolicy-peers-alone runs");
    assert!(output.status.success(), "mcpolicy-peers-alone failed");
    let text = String::from_utf8_lossy(&output.stdout);
    let fields: Vec<f64> = text
        .split_whitespace()
        .map(|f| f.parse().expect("a number"))
        .collect();
    assert_eq!(fields.len(), 3, "{text}");
    assert_eq!(
        fields[2] as usize, allowed,
        "mcpolicy alone decided otherwise"
    );
    (fields[0], fields[1])
}

fn main() {
    let rules = rules();
    let requests: Vec<Vec<u8>> = (0..REQUESTS).map(request_bytes).collect();
    let sizes: Vec<usize> = requests.iter().map(Vec::len).collect();
    println!(
        "{} servers, {} requests of {}–{} bytes; load average {} at the start",
        SERVERS,
        REQUESTS,
        sizes.iter().min().unwrap_or(&0),
        sizes.iter().max().unwrap_or(&0),
        load_average()
    );

    let policy = mcpolicy_policy(&rules);
    let alone = build_alone();
    let ctx = ClientContext::with_sampling_context(true);
    let cedar = Cedar::new(&rules);
    let mut rego = rego_engine(&rules);

    // Agreement on every pair, before any timing.
    let engine = mcpolicy_engine(&policy);
    let mut pairs = Vec::with_capacity(SERVERS * REQUESTS);
    let mut allowed = 0;
    for (s, rule) in rules.iter().enumerate() {
        for (r, bytes) in requests.iter().enumerate() {
            let ours = mcpolicy_decide(&engine, &rule.id, bytes, &ctx);
            let theirs = cedar.decide(&rule.id, bytes);
            let rego_says = rego_decide(&mut rego, &rule.id, bytes);
            assert!(
                ours == theirs && ours == rego_says,
                "disagreement on ({}, request {r}): mcpolicy {ours}, Cedar {theirs}, Rego {rego_says}",
                rule.id
            );
            allowed += usize::from(ours);
            pairs.push((s, r));
        }
    }
    println!(
        "agreement: all {} (server, request) pairs decided alike ({allowed} allowed, {} denied)",
        pairs.len(),
        pairs.len() - allowed
    );
    let pairs = {
        let shuffled = self::pairs();
        assert_eq!(shuffled.len(), pairs.len());
        shuffled
    };
    let denied: Vec<(usize, usize)> = pairs
        .iter()
        .copied()
        .filter(|&(s, r)| !cedar.decide(&rules[s].id, &requests[r]))
        .collect();
    let prebuilt: Vec<Request> = pairs
        .iter()
        .map(|&(s, r)| cedar.request(&rules[s].id, message_count(&requests[r])))
        .collect();

    const NAMES: [&str; 9] = [
        "SHA-256 of the request bytes",
        "mcpolicy decide, fresh",
        "Cedar from bytes",
        "Rego from bytes",
        "mcpolicy decide, replayed denial",
        "Cedar, same denied pairs",
        "Cedar is_authorized, request prebuilt",
        "mcpolicy decide, fresh, in this binary (Cedar's serde_json features)",
        "mcpolicy decide, replayed denial, in this binary",
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); NAMES.len()];
    let mut ratios: [Vec<f64>; 4] = Default::default();
    println!(
        "\nper round, ns per decision (Cedar/mcpolicy, Rego/mcpolicy, mcpolicy/SHA-256, replay/SHA-256):"
    );
    for round in 0..ROUNDS {
        // A fresh store per round: every pair is decided fresh once.
        let engine = mcpolicy_engine(&policy);
        let mut round_times = [0.0; NAMES.len()];
        for turn in 0..4 {
            match (turn + round) % 4 {
                0 => {
                    round_times[0] =
                        time_per_pair(&pairs, |_, r| Sha256::digest(&requests[r])[0] & 1 == 0)
                }
                1 => {
                    let (fresh, replay) = alone_round(&alone, allowed);
                    round_times[1] = fresh;
                    round_times[4] = replay;
                    round_times[7] = time_per_pair(&pairs, |s, r| {
                        mcpolicy_decide(&engine, &rules[s].id, &requests[r], &ctx)
                    })
                }
                2 => {
                    round_times[2] =
                        time_per_pair(&pairs, |s, r| cedar.decide(&rules[s].id, &requests[r]))
                }
                _ => {
                    round_times[3] = time_per_pair(&pairs, |s, r| {
                        rego_decide(&mut rego, &rules[s].id, &requests[r])
                    })
                }
            }
        }
        // Every denial is stored now: the same denied pairs again.
        round_times[8] = time_per_pair(&denied, |s, r| {
            mcpolicy_decide(&engine, &rules[s].id, &requests[r], &ctx)
        });
        round_times[5] = time_per_pair(&denied, |s, r| cedar.decide(&rules[s].id, &requests[r]));
        let mut next = 0;
        round_times[6] = time_per_pair(&pairs, |_, _| {
            next += 1;
            cedar.is_authorized(&prebuilt[next - 1])
        });
        let round_ratios = [
            round_times[2] / round_times[1],
            round_times[3] / round_times[1],
            round_times[1] / round_times[0],
            round_times[4] / round_times[0],
        ];
        println!(
            "round {:2}: sha {:6.0}  mcpolicy {:6.0}  cedar {:6.0}  rego {:6.0}  replay {:6.0}  | {:.2}× {:.2}× {:.2}× {:.2}×  (load {})",
            round + 1,
            round_times[0],
            round_times[1],
            round_times[2],
            round_times[3],
            round_times[4],
            round_ratios[0],
            round_ratios[1],
            round_ratios[2],
            round_ratios[3],
            load_average()
        );
        for (all, value) in times.iter_mut().zip(round_times) {
            all.push(value);
        }
        for (all, value) in ratios.iter_mut().zip(round_ratios) {
            all.push(value);
        }
    }

    println!("\nmedians of {ROUNDS} rounds:");
    println!("| what | ns per decision |\n|---|---:|");
    for (name, values) in NAMES.iter().zip(times.iter_mut()) {
        println!("| {name} | {:.0} |", median(values));
    }
    let ratio_names = [
        "Cedar from bytes / mcpolicy fresh",
        "Rego from bytes / mcpolicy fresh",
        "mcpolicy fresh / SHA-256 of the bytes",
        "mcpolicy replay / SHA-256 of the bytes",
    ];
    println!("\n| paired ratio | median | min | max |\n|---|---:|---:|---:|");
    for (name, values) in ratio_names.iter().zip(ratios.iter_mut()) {
        let m = median(values);
        println!(
            "| {name} | {m:.2}× | {:.2}× | {:.2}× |",
            values[0],
            values[values.len() - 1]
        );
    }
    println!("\nload average {} at the end", load_average());
}
