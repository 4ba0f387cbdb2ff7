//! A decision from bytes is made on the strict reader's borrowed tree,
//! never on a `serde_json::Value` (`runtime/src/json.rs`); a request an SDK
//! already read is decided on its `Value`. This holds the two to the same
//! answers: for generated sequences of requests, written as text (members
//! in any order, escapes, `_meta`, annotations, unknown members, integral
//! `maxTokens` spelt as doubles, hints a `models` trim narrows, tools a
//! switch refuses, inputs over a limit, consent asked once, budgets and a
//! rate that run out), `Engine::decide` on the bytes and
//! `Engine::decide_request` on the same bytes read by serde_json's path
//! give, one request after another on two engines, the same request, the
//! same identity, the same decision, the same trims, the same params to
//! run and the same reply bytes. Replays and admissions line up because
//! every decision of the sequence is made on both.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod engine_support;

use engine_support::*;
use mcpolicy_runtime::engine::{Answer, ClientContext, Decision};
use mcpolicy_runtime::identity::canonical_bytes;
use mcpolicy_runtime::request::{self, Limits};
use mcpolicy_runtime::table::{BudgetMetric, Consent, ContextScope, Table, Window};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

const SERVERS: [&str; 7] = [
    "open",
    "trim",
    "tools-off",
    "input",
    "first",
    "budget",
    "closed",
];

fn policy_table() -> Table {
    let mut trim = open_block();
    trim.max_context = ContextScope::ThisServer;
    trim.max_tokens = Some(256);
    trim.models = Some(vec!["claude-*".to_owned(), "gpt-4".to_owned()]);
    let mut tools_off = open_block();
    tools_off.tools.enabled = false;
    let mut input = open_block();
    input.max_input = limit(400);
    input.max_messages = limit(2);
    let mut first = open_block();
    first.consent = Consent::First;
    let mut budget_block = open_block();
    budget_block.budgets = vec![budget(
        BudgetMetric::Tokens,
        3000,
        Window::RollingMs(3_600_000),
    )];
    budget_block.rate = rate(4, 60_000);
    let mut closed = open_block();
    closed.sampling.enabled = false;
    table(vec![
        ("open", open_block()),
        ("trim", trim),
        ("tools-off", tools_off),
        ("input", input),
        ("first", first),
        ("budget", budget_block),
        ("closed", closed),
    ])
}

/// A JSON string's text, some characters written as `\u` escapes or
/// `\/`: the tree decodes those into owned strings.
fn string_text(text: &str, escape: &[bool]) -> String {
    let mut out = String::from("\"");
    for (i, c) in text.chars().enumerate() {
        let escaped = escape
            .get(i % escape.len().max(1))
            .copied()
            .unwrap_or(false);
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '/' if escaped => out.push_str("\\/"),
            c if (c as u32) < 0x20 || escaped => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// JSON text of `value`, objects' members in the order `turn` picks and
/// strings escaped where `escape` says.
fn write(value: &Value, turn: usize, escape: &[bool], out: &mut String) {
    match value {
        Value::String(text) => out.push_str(&string_text(text, escape)),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, turn + i, escape, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            let len = members.len().max(1);
            members.rotate_left(turn % len);
            if turn % 2 == 1 {
                members.reverse();
            }
            out.push('{');
            for (i, (key, item)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&string_text(key, escape));
                out.push(':');
                write(item, turn + i + 1, escape, out);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn text() -> impl Strategy<Value = String> {
    proptest::string::string_regex(
        "[a-zA-Z0-9 ./]{0,10}(é|e\u{301}|漢|🙂|\u{200b}|\t| |\"|\\\\){0,3}",
    )
    .unwrap()
}

fn block() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => (text(), any::<bool>()).prop_map(|(text, annotated)| {
            let mut block = json!({"type": "text", "text": text});
            if annotated {
                block["annotations"] = json!({"audience": ["user"]});
                block["_meta"] = json!({"k": 1});
            }
            block
        }),
        1 => Just(json!({"type": "image", "data": "aGk=", "mimeType": "image/png"})),
        1 => text().prop_map(|name| json!({"type": "tool_use", "id": "u1", "name": format!("t{name}"), "input": {}})),
        1 => (text(), any::<bool>()).prop_map(|(text, error)| json!({
            "type": "tool_result", "toolUseId": "u1", "isError": error,
            "content": [{"type": "text", "text": text}],
        })),
    ]
}

fn message() -> impl Strategy<Value = Value> {
    (
        prop_oneof![Just("user"), Just("assistant")],
        prop_oneof![
            2 => block(),
            1 => proptest::collection::vec(block(), 1..3).prop_map(Value::Array),
        ],
        any::<bool>(),
    )
        .prop_map(|(role, content, meta)| {
            let mut message = json!({"role": role, "content": content});
            if meta {
                message["_meta"] = json!({"trace": "x"});
            }
            message
        })
}

/// Params, and whether to spoil them (a request both paths refuse).
fn params() -> impl Strategy<Value = Value> {
    (
        proptest::collection::vec(message(), 1..4),
        proptest::option::of(text()),
        proptest::option::of(prop_oneof![
            Just("none"),
            Just("thisServer"),
            Just("allServers")
        ]),
        1u64..2000,
        0usize..4,
        proptest::option::of(proptest::collection::vec(
            prop_oneof![
                Just("claude-3"),
                Just("gpt-4"),
                Just("gemini"),
                Just("claude-\u{e9}")
            ],
            0..3,
        )),
        0usize..3,
        proptest::option::of(text()),
        0usize..12,
    )
        .prop_map(
            |(messages, system, context, max_tokens, spelling, hints, tools, extra, spoil)| {
                let mut params = Map::new();
                params.insert("messages".into(), Value::Array(messages));
                if let Some(system) = system {
                    params.insert("systemPrompt".into(), Value::from(system));
                }
                if let Some(context) = context {
                    params.insert("includeContext".into(), Value::from(context));
                }
                let max_tokens: Value = match spelling {
                    0 | 1 => Value::from(max_tokens),
                    2 => serde_json::from_str(&format!("{max_tokens}.0")).unwrap(),
                    _ => serde_json::from_str(&format!("{max_tokens}e0")).unwrap(),
                };
                params.insert("maxTokens".into(), max_tokens);
                if let Some(hints) = hints {
                    let hints: Vec<Value> =
                        hints.iter().map(|name| json!({"name": name})).collect();
                    params.insert(
                        "modelPreferences".into(),
                        json!({"hints": hints, "costPriority": 0.5}),
                    );
                }
                match tools {
                    1 => {
                        params.insert("tools".into(), json!([]));
                    }
                    2 => {
                        params.insert(
                            "tools".into(),
                            json!([{"name": "search", "inputSchema": {"type": "object"}}]),
                        );
                    }
                    _ => {}
                }
                if let Some(extra) = extra {
                    params.insert("x-extra".into(), json!({"note": extra}));
                }
                // A quarter of the requests are invalid, each way one in twelve.
                match spoil {
                    0 => {
                        params.insert("maxTokens".into(), json!(0));
                    }
                    1 => {
                        params.insert("includeContext".into(), json!("everything"));
                    }
                    2 => {
                        params.remove("messages");
                    }
                    _ => {}
                }
                Value::Object(params)
            },
        )
}

/// Params as every JSON reader compares them.
fn canonical(params: Map<String, Value>) -> String {
    String::from_utf8(canonical_bytes(&Value::Object(params))).unwrap()
}

/// What a decision says, comparable across two engines.
fn summary(decision: &Decision, original: &Map<String, Value>) -> Value {
    match decision {
        Decision::Allow(grant) | Decision::Trim(grant) => json!({
            "kind": if grant.is_trim() { "trim" } else { "allow" },
            "identity": grant.identity(),
            "approval": grant.approval_key(),
            "replayed": grant.replayed(),
            "meta": grant.annotations().to_meta(),
            "params": canonical(grant.params(original)),
            "deadline": grant.deadline_ms(),
        }),
        Decision::Deny(denial) => json!({
            "kind": "deny",
            "replayed": denial.replayed(),
            "represented": denial.represented(),
            "cause": format!("{:?}", denial.cause()),
            "reply": String::from_utf8(denial.reply(None)).unwrap(),
        }),
        Decision::NeedsConsent(pending) => json!({
            "kind": "consent",
            "identity": pending.identity(),
            "approval": pending.approval_key(),
            "meta": pending.annotations().to_meta(),
            "params": canonical(pending.params(original)),
        }),
    }
}

/// The decision of a pending consent, approved (the user says yes), so
/// that later requests of the sequence meet the stored approval.
fn settled(decision: Decision) -> Decision {
    match decision {
        Decision::NeedsConsent(pending) => resolve(pending, true),
        other => other,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_tree_decides_as_the_value_does(
        sequence in proptest::collection::vec(
            (0..SERVERS.len(), params(), 0usize..4, proptest::collection::vec(any::<bool>(), 1..5)),
            1..10,
        ),
    ) {
        let tree = Harness::new(policy_table());
        let value = Harness::new(policy_table());
        let ctx = ClientContext::with_sampling_context(true);
        let protocol = tree.engine.policy().table().protocol;
        for (id, (server, params, turn, escape)) in sequence.iter().enumerate() {
            let server = SERVERS[*server];
            let mut frame = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"sampling/createMessage","params":"#);
            write(params, *turn, escape, &mut frame);
            frame.push('}');
            let bytes = frame.as_bytes();

            let answer = tree.engine.decide(server, bytes, &ctx);
            let read = request::parse_sampling_for(bytes, &Limits::default(), protocol);
            match (answer, read) {
                (Answer::Invalid(tree_refusal), Err(value_refusal)) => {
                    prop_assert_eq!(tree_refusal, value_refusal);
                }
                (Answer::Decided { request: tree_request, decision }, Ok(value_request)) => {
                    prop_assert_eq!(&tree_request, &value_request, "{}", frame);
                    prop_assert_eq!(tree_request.rewritten(), value_request.rewritten());
                    let value_decision = value
                        .engine
                        .decide_request(server, &value_request, &ctx)
                        .unwrap();
                    prop_assert_eq!(
                        summary(&decision, tree_request.params()),
                        summary(&value_decision, value_request.params()),
                        "{}", frame
                    );
                    settled(decision);
                    settled(value_decision);
                }
                (answer, read) => {
                    prop_assert!(false, "the paths part: {answer:?} against {read:?} on {frame}");
                }
            }
            // Time passes alike on both: windows and cooldowns move together.
            tree.clock.advance(7_000);
            value.clock.advance(7_000);
        }
    }
}

/// A request decided from bytes keeps its text and reads its params when
/// asked: what it reads does not depend on the public `id`, which a caller
/// may change (a retry under a new envelope) or take.
#[test]
fn a_decided_request_reads_its_params_whatever_its_id_becomes() {
    let h = Harness::new(policy_table());
    let ctx = ClientContext::with_sampling_context(true);
    let frame = br#"{"jsonrpc":"2.0","id":5,"method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":3e2}}"#;
    let Answer::Decided { mut request, .. } = h.engine.decide("open", frame, &ctx) else {
        panic!("decided");
    };
    request.id = None;
    assert_eq!(request.params()["maxTokens"], json!(300));
    assert_eq!(request.params()["messages"][0]["content"]["text"], "hi");
    assert!(request.params().get("jsonrpc").is_none());
    let mut again = match h.engine.decide("open", frame, &ctx) {
        Answer::Decided { request, .. } => request,
        other => panic!("decided: {other:?}"),
    };
    again.id = Some(json!("other"));
    assert_eq!(again.into_params()["maxTokens"], json!(300));
}

/// A hang guard for the tree's key-clash check, not a speed target (those
/// live in `benches/request.rs`, `REQUEST_PHASE=engine`): an object of
/// 100,000 keys, plain or decomposed, is decided from bytes in well under
/// a second here, and comparing each key with every earlier one (as the
/// tree does only for its first 16) would take minutes in this debug
/// build.
#[test]
fn a_hundred_thousand_keys_are_decided_from_bytes_in_linear_time() {
    let h = Harness::new(policy_table());
    let ctx = ClientContext::with_sampling_context(true);
    for spelling in ["k{i}", "k{i}e\\u0301", "k{i}e\u{301}"] {
        let members: Vec<String> = (0..100_000)
            .map(|i| format!("\"{}\":{i}", spelling.replace("{i}", &i.to_string())))
            .collect();
        let frame = format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{{"messages":[{{"role":"user","content":{{"type":"text","text":"hi"}}}}],"maxTokens":1,"_meta":{{{}}}}}}}"#,
            members.join(",")
        );
        let start = std::time::Instant::now();
        let answer = h.engine.decide("open", frame.as_bytes(), &ctx);
        let elapsed = start.elapsed();
        assert!(
            matches!(answer, Answer::Decided { .. }),
            "{spelling}: {answer:?}"
        );
        assert!(
            elapsed < std::time::Duration::from_secs(20),
            "100,000 keys spelt {spelling} took {elapsed:?}"
        );
    }
}
