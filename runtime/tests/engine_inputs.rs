//! Bytes in, frames out: invalid requests of every kind get a JSON-RPC error
//! frame (never a panic), and MCP 2026-07-28 `inputRequests` are decided
//! entry by entry.

mod engine_support;

use std::sync::OnceLock;

use engine_support::*;
use mcpolicy_runtime::engine::{Answer, ClientContext, Decision, InputOutcome};
use mcpolicy_runtime::table::{Consent, ContextScope, ProtocolRevision, builtin};
use proptest::prelude::*;
use serde_json::{Value, json};

fn answer_frame(answer: &Answer) -> Option<Value> {
    match answer {
        Answer::Invalid(rejection) => Some(parse(&rejection.reply())),
        Answer::Failed { reply, .. } => Some(parse(reply)),
        Answer::Decided {
            decision: Decision::Deny(d),
            request,
        } => Some(parse(&d.reply(request.id.as_ref()))),
        Answer::Decided { .. } => None,
    }
}

fn invalid(h: &Harness, bytes: &[u8]) -> Value {
    match h.engine.decide("s", bytes, &ClientContext::default()) {
        Answer::Invalid(rejection) => {
            let frame = parse(&rejection.reply());
            assert_eq!(frame["error"]["code"], rejection.code());
            assert_eq!(frame["jsonrpc"], "2.0");
            frame
        }
        other => panic!(
            "expected an invalid-request frame for {:?}, got {other:?}",
            String::from_utf8_lossy(bytes)
        ),
    }
}

#[test]
fn invalid_requests_get_frames() {
    let h = Harness::new(table(vec![]));
    let cases: &[(&[u8], i64, Value)] = &[
        (b"", -32700, Value::Null),
        (b"{", -32700, Value::Null),
        (b"\xff\xfe", -32700, Value::Null),
        (b"[]", -32600, Value::Null),
        (b"42", -32600, Value::Null),
        (br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#, -32600, json!(1)),
        (br#"{"jsonrpc":"1.0","id":1,"method":"sampling/createMessage","params":{"messages":[],"maxTokens":1}}"#, -32600, json!(1)),
        (br#"{"jsonrpc":"2.0","id":"x","method":"sampling/createMessage","params":[]}"#, -32602, json!("x")),
        (br#"{"jsonrpc":"2.0","id":2,"method":"sampling/createMessage","params":{"maxTokens":1}}"#, -32602, json!(2)),
        (br#"{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage","params":{"messages":[]}}"#, -32602, json!(3)),
        (br#"{"jsonrpc":"2.0","id":4,"method":"sampling/createMessage","params":{"messages":[],"maxTokens":-1}}"#, -32602, json!(4)),
        // Duplicate keys, also equal only after NFC: a bypass if parsers disagree.
        (br#"{"jsonrpc":"2.0","id":5,"method":"sampling/createMessage","params":{"messages":[],"maxTokens":1,"maxTokens":2}}"#, -32600, Value::Null),
        ("{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"sampling/createMessage\",\"params\":{\"messages\":[{\"caf\u{e9}\":1,\"cafe\u{301}\":2}],\"maxTokens\":1}}".as_bytes(), -32600, Value::Null),
        // A lone surrogate.
        (br#"{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{"messages":["\ud800"],"maxTokens":1}}"#, -32700, Value::Null),
    ];
    for (bytes, code, id) in cases {
        let frame = invalid(&h, bytes);
        let got = frame["error"]["code"].as_i64().expect("code");
        // Duplicates may be classed -32700 or -32600 by the parser; both are request errors.
        if *code == -32600
            && frame["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("duplicate"))
        {
            assert!(got == -32600 || got == -32700, "{frame}");
        } else {
            assert_eq!(got, *code, "{}: {frame}", String::from_utf8_lossy(bytes));
        }
        if id.is_null() {
            assert!(frame["id"].is_null() || frame["id"].is_number(), "{frame}");
        } else {
            assert_eq!(&frame["id"], id, "{frame}");
        }
        assert!(
            frame["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
}

/// A request nested `depth` arrays deep inside `messages`.
fn nested(depth: usize) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{{"messages":[{}1{}],"maxTokens":1}}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    )
}

/// Just past each bound the engine reads with (nesting 64 deep, 16 MiB):
/// both are refused with a frame. Cheap: the size bound is checked before
/// anything is read, the depth bound as soon as it is crossed.
#[test]
fn deep_and_huge_inputs_get_frames() {
    let h = Harness::new(table(vec![]));
    let limits = mcpolicy_runtime::request::Limits::default();
    invalid(&h, nested(limits.max_depth).as_bytes());
    invalid(&h, &vec![b' '; limits.max_bytes + 1]);
}

/// The same far past the bounds (100,000 arrays deep, 64 MiB): no stack
/// overflow, no allocation in proportion. Ignored by default for its cost
/// (about a second of a debug build); `.ci/run` runs it with `--ignored`.
#[test]
#[ignore = "full-size inputs: run by .ci/run with --ignored"]
fn far_too_deep_and_far_too_large_inputs_get_frames() {
    let h = Harness::new(table(vec![]));
    invalid(&h, nested(100_000).as_bytes());
    invalid(&h, &vec![b' '; 64 * 1024 * 1024 + 1]);
}

#[test]
fn valid_bytes_are_decided_and_denials_echo_the_id() {
    let mut off = open_block();
    off.sampling.enabled = false;
    let h = Harness::new(table(vec![("s", off)]));
    let bytes = br#"{"jsonrpc":"2.0","id":"req-1","method":"sampling/createMessage","params":{"messages":[],"maxTokens":1}}"#;
    let frame = answer_frame(&h.engine.decide("s", bytes, &ClientContext::default()))
        .expect("a denial frame");
    assert_eq!(frame["id"], "req-1");
    assert_eq!(frame["error"]["data"]["reason"], builtin::SAMPLING_DISABLED);
    // Bare params are accepted too (no id: the frame carries null).
    let bare = br#"{"messages":[],"maxTokens":1}"#;
    let frame = answer_frame(&h.engine.decide("s", bare, &ClientContext::default()))
        .expect("a denial frame");
    assert!(frame["id"].is_null());
}

#[test]
fn same_request_in_other_spellings_replays_the_same_decision() {
    let mut block = open_block();
    block.consent = Consent::First;
    let h = Harness::new(table(vec![("s", block)]));
    let a = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"sampling/createMessage\",\"params\":{\"messages\":[{\"role\":\"user\",\"content\":{\"type\":\"text\",\"text\":\"caf\u{e9}\"}}],\"maxTokens\":1,\"systemPrompt\":\"S\"}}";
    let b = "{ \"id\" : 2 , \"params\" : { \"systemPrompt\" : \"\\u0053\", \"maxTokens\" : 999, \"messages\" : [ { \"content\" : { \"text\" : \"cafe\u{301}\", \"type\" : \"text\" }, \"role\" : \"user\" } ] }, \"method\" : \"sampling/createMessage\", \"jsonrpc\" : \"2.0\" }";
    let Answer::Decided {
        decision: Decision::NeedsConsent(p),
        ..
    } = h
        .engine
        .decide("s", a.as_bytes(), &ClientContext::default())
    else {
        panic!("consent expected");
    };
    let denied = resolve(p, false);
    let Decision::Deny(first) = denied else {
        panic!()
    };
    let Answer::Decided {
        decision: Decision::Deny(second),
        ..
    } = h
        .engine
        .decide("s", b.as_bytes(), &ClientContext::default())
    else {
        panic!("replayed denial expected");
    };
    assert!(second.replayed());
    assert_eq!(data_text(&first), data_text(&second));
}

const INPUT_REQUIRED: &str = r#"{
  "resultType": "input_required",
  "inputRequests": {
    "sample": {"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": "summarise"}}],
        "includeContext": "allServers", "maxTokens": 20}},
    "wide": {"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": "again"}}],
        "maxTokens": 20, "tools": [{"name": "t", "inputSchema": {"type": "object"}}]}},
    "broken": {"method": "sampling/createMessage", "params": {"maxTokens": 20}},
    "roots": {"method": "roots/list", "params": {}}
  },
  "requestState": "opaque"
}"#;

#[test]
fn input_requests_are_decided_entry_by_entry() {
    let mut block = open_block();
    block.tools.enabled = false;
    block.max_context = ContextScope::AllServers;
    let t = table_with(
        ProtocolRevision::V2026_07_28,
        reasons(),
        vec![("srv", block)],
        open_block(),
    );
    let h = Harness::new(t);
    let decisions = h
        .engine
        .decide_input_required("srv", INPUT_REQUIRED.as_bytes(), &ClientContext::default())
        .expect("well-formed result");
    let keys: Vec<&str> = decisions.iter().map(|d| d.key.as_str()).collect();
    assert_eq!(keys, ["broken", "roots", "sample", "wide"]);
    for d in &decisions {
        match (d.key.as_str(), &d.outcome) {
            ("roots", InputOutcome::NotSampling) => {}
            ("broken", InputOutcome::Invalid(error)) => {
                assert_eq!(error.code(), -32602);
                let message = error.message();
                assert!(message.contains("messages"), "{message}");
            }
            // No `sampling.context` capability under 2026-07-28: context becomes none.
            (
                "sample",
                InputOutcome::Decided {
                    request,
                    decision: Decision::Trim(grant),
                },
            ) => {
                assert_eq!(grant.params(request.params())["includeContext"], "none");
            }
            (
                "wide",
                InputOutcome::Decided {
                    decision: Decision::Deny(denial),
                    ..
                },
            ) => {
                // The client's own pending call (id 12) is answered with the same data.
                let local = parse(&denial.local_error(Some(&json!(12))));
                assert_eq!(local["id"], 12);
                assert_eq!(local["error"]["code"], CODE);
                assert_eq!(
                    serde_json::to_string(&local["error"]["data"]).expect("json"),
                    // serde_json sorts keys; compare as values, and the text itself below.
                    serde_json::to_string(&parse(data_text(denial).as_bytes())).expect("json")
                );
                assert!(
                    String::from_utf8_lossy(&denial.local_error(Some(&json!(12))))
                        .contains(&data_text(denial))
                );
                assert_eq!(local["error"]["data"]["reason"], builtin::TOOLS_DISABLED);
            }
            (key, outcome) => panic!("{key}: unexpected {outcome:?}"),
        }
    }
    // A list form is accepted, keyed by index.
    let list = json!({"inputRequests": [{"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 1}}]});
    let decisions = h
        .engine
        .decide_input_required(
            "srv",
            list.to_string().as_bytes(),
            &ClientContext::default(),
        )
        .expect("well-formed result");
    assert_eq!(decisions.len(), 1);
    assert_eq!(decisions[0].key, "0");
    // Malformed results are refused as a whole.
    let err = h
        .engine
        .decide_input_required(
            "srv",
            br#"{"inputRequests": {"a": 1, "a": 2}}"#,
            &ClientContext::default(),
        )
        .expect_err("duplicate keys");
    assert!(err.code() == -32600 || err.code() == -32700);
    assert!(
        h.engine
            .decide_input_required("srv", b"5", &ClientContext::default())
            .expect("a number is JSON")
            .is_empty()
    );
}

fn sampling_bytes() -> impl Strategy<Value = Vec<u8>> {
    // Mutations of a valid request: truncations, byte flips and insertions.
    let valid = br#"{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":10,"includeContext":"allServers","modelPreferences":{"hints":[{"name":"x"}]},"tools":[]}}"#.to_vec();
    (
        proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 0..6),
        Just(valid),
    )
        .prop_map(|(edits, mut bytes)| {
            for (at, byte, op) in edits {
                if bytes.is_empty() {
                    break;
                }
                let i = at % bytes.len();
                match op {
                    0 => bytes[i] = byte,
                    1 => bytes.insert(i, byte),
                    _ => bytes.truncate(i),
                }
            }
            bytes
        })
}

/// Whether `value` is a non-negative integer no larger than `max`, in any
/// spelling the engine accepts (`1`, `1.0`, `1E0`: JSON does not tell them
/// apart, and an allowed request is forwarded as the server spelled it).
fn integral_at_most(value: &Value, max: u64) -> bool {
    value.as_u64().is_some_and(|n| n <= max)
        || value
            .as_f64()
            .is_some_and(|f| f >= 0.0 && f.fract() == 0.0 && f <= max as f64)
}

/// Found by `mutated_requests_always_get_a_frame_or_a_decision`: a float
/// spelling of a `maxTokens` under the block's limit is allowed, and one
/// over it is lowered to the integer limit; either way the params handed on
/// carry an integer (`docs/spec/evaluation.md`, "Step 1: Validation": `1.0` is refused by
/// integer-typed clients).
#[test]
fn float_spelled_max_tokens_is_allowed_or_lowered() {
    let h = strict_harness();
    let request = |max_tokens: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{{"messages":[{{"role":"user","content":{{"type":"text","text":"hi"}}}}],"maxTokens":{max_tokens}}}}}"#
        )
    };
    for (spelled, forwarded) in [("1E0", json!(1)), ("9.0", json!(5)), ("5e0", json!(5))] {
        let answer = h
            .engine
            .decide("s", request(spelled).as_bytes(), &ClientContext::default());
        let Answer::Decided { request, decision } = &answer else {
            panic!("{spelled}: {answer:?}");
        };
        let grant = grant_of(decision).unwrap_or_else(|| panic!("{spelled}: {decision:?}"));
        let lowered = grant.params(request.params());
        assert_eq!(lowered.get("maxTokens"), Some(&forwarded), "{spelled}");
        assert!(integral_at_most(&forwarded, 5));
    }
}

fn open_harness() -> &'static Harness {
    static H: OnceLock<Harness> = OnceLock::new();
    H.get_or_init(|| Harness::new(table(vec![])))
}

fn strict_harness() -> &'static Harness {
    static H: OnceLock<Harness> = OnceLock::new();
    H.get_or_init(|| {
        let mut block = open_block();
        block.max_context = ContextScope::None;
        block.max_tokens = Some(5);
        block.models = Some(vec!["y*".into()]);
        block.tools.enabled = false;
        block.max_input = limit(100);
        block.rate = rate(1_000_000, 60_000);
        Harness::new(table(vec![("s", block)]))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_always_get_a_frame_or_a_decision(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let h = open_harness();
        let answer = h.engine.decide("s", &bytes, &ClientContext::default());
        if let Some(frame) = answer_frame(&answer) {
            prop_assert_eq!(&frame["jsonrpc"], "2.0");
            prop_assert!(frame["error"]["code"].is_i64());
        }
    }

    #[test]
    fn mutated_requests_always_get_a_frame_or_a_decision(bytes in sampling_bytes()) {
        let h = strict_harness();
        let answer = h.engine.decide("s", &bytes, &ClientContext::default());
        match &answer {
            Answer::Decided { request, decision } => {
                if let Some(grant) = grant_of(decision) {
                    let lowered = grant.params(request.params());
                    prop_assert!(lowered.get("maxTokens").is_some_and(|t| integral_at_most(t, 5)));
                    let mut result = json!({"model": "y"});
                    prop_assert!(grant.annotate(&mut result));
                }
            }
            _ => {
                let frame = answer_frame(&answer).expect("frame");
                prop_assert_eq!(&frame["jsonrpc"], "2.0");
            }
        }
    }

    #[test]
    fn random_input_required_results_never_panic(bytes in sampling_bytes()) {
        let h = open_harness();
        let mut wrapped = br#"{"inputRequests":{"k":"#.to_vec();
        wrapped.extend_from_slice(&bytes);
        wrapped.extend_from_slice(b"}}");
        let _ = h.engine.decide_input_required("s", &wrapped, &ClientContext::default());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// The engine's server index (exact ids hashed, globs tried in order)
    /// picks the same block as `Table::entry_for`, first match wins.
    #[test]
    fn server_lookup_agrees_with_the_table(
        patterns in proptest::collection::vec("[ab*?é]{1,4}", 0..6),
        id in "[abé]{0,4}",
    ) {
        let servers: Vec<(&str, _)> = patterns
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut block = open_block();
                block.max_tokens = Some(i as u64 + 1);
                (p.as_str(), block)
            })
            .collect();
        let mut fallback = open_block();
        fallback.max_tokens = Some(1000);
        let t = table_with(ProtocolRevision::V2025_11_25, reasons(), servers, fallback);
        let expected = t.entry_for(&id).block.max_tokens;
        let h = Harness::new(t);
        let request = params(json!({"messages": [], "maxTokens": 100_000}));
        let got = grant_of(&h.decide(&id, &request)).and_then(|g| g.lowered().max_tokens);
        prop_assert_eq!(got, expected);
    }
}
