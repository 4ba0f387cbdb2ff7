//! The differential test of request validation against MCP's published
//! JSON Schema (`docs/spec/evaluation.md`, "Step 1: Validation"): random
//! `sampling/createMessage` requests, and mutations of them, are validated
//! by the runtime under each revision and by Python's `jsonschema` against
//! that revision's `CreateMessageRequest` (`tests/cases/mcp-schema/`). The
//! runtime accepts exactly what the schema accepts, except where the spec
//! says it is stricter ([`stricter`]).
//!
//! Needs a Python with `jsonschema` (`MCPOLICY_PYTHON`; `.ci/run` installs
//! it); skipped without one unless `MCPOLICY_REQUIRE_PYTHON` is set. The
//! seed is printed; `MCPOLICY_SCHEMA_SEED=N` replays it, and
//! `MCPOLICY_SCHEMA_CASES=N` (default 1500 per revision) runs longer.
//!
//! On the same mutated requests, without Python: every refusal's JSON path
//! names a node of the request, or a member missing from one of its
//! objects (`an_error_path_names_a_node_of_the_request`).

use std::io::Write;
use std::process::{Command, Stdio};

use mcpolicy_runtime::request::validate_sampling_for;
use mcpolicy_runtime::table::ProtocolRevision;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};
use serde_json::{Map, Value, json};

fn python_with_jsonschema() -> Option<String> {
    let python = std::env::var("MCPOLICY_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let ok = Command::new(&python)
        .args(["-c", "import jsonschema"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(python);
    }
    assert!(
        std::env::var_os("MCPOLICY_REQUIRE_PYTHON").is_none(),
        "{python} cannot import jsonschema, and MCPOLICY_REQUIRE_PYTHON is set"
    );
    eprintln!("skipping: {python} cannot import jsonschema");
    None
}

/// What the published schema says of each `(revision, request)`.
fn schema_accepts(python: &str, cases: &[(ProtocolRevision, Value)]) -> Vec<bool> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/cases/mcp-schema/validate.py"
    );
    let mut child = Command::new(python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run validate.py");
    let mut input = String::new();
    for (revision, request) in cases {
        input.push_str(&json!([revision.as_str(), request]).to_string());
        input.push('\n');
    }
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().expect("validate.py output");
    writer.join().expect("writer").expect("write requests");
    assert!(output.status.success(), "validate.py failed");
    let verdicts: Vec<bool> = String::from_utf8(output.stdout)
        .expect("utf-8")
        .lines()
        .map(|line| line == "1")
        .collect();
    assert_eq!(verdicts.len(), cases.len());
    verdicts
}

fn envelope(params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage", "params": params})
}

/// The rules by which the runtime is stricter than the published schema,
/// as `docs/spec/evaluation.md` ("Step 1: Validation") lists them; `true`
/// when one of them refuses `params`. `tools_valid_2025_11_25` is what the
/// 2025-11-25 schema says of `params`' `tools` and `toolChoice` alone.
fn stricter(revision: ProtocolRevision, params: &Value, tools_valid_2025_11_25: bool) -> bool {
    let Some(params) = params.as_object() else {
        return false;
    };
    // `maxTokens` is a positive integer (0 asks for nothing a client
    // runs), at most 2^64 - 1, and at most 2^53 when written with a
    // fraction or an exponent (a double holds no larger integer exactly).
    let max_tokens_not_positive = params.get("maxTokens").is_some_and(|n| {
        n.as_u64() == Some(0)
            || (n.as_u64().is_none()
                && n.as_f64()
                    .is_some_and(|f| f.fract() == 0.0 && (f <= 0.0 || f > 9_007_199_254_740_992.0)))
    });
    // `_meta` is an object under every revision (2025-11-25's schema says so itself).
    let meta_not_object = params.get("_meta").is_some_and(|m| !m.is_object());
    // Under 2025-06-18, `tools` and `toolChoice` as 2025-11-25 defines them.
    let tools_2025_06_18 = revision == ProtocolRevision::V2025_06_18
        && (params.contains_key("tools") || params.contains_key("toolChoice"))
        && !tools_valid_2025_11_25;
    max_tokens_not_positive || meta_not_object || tools_2025_06_18
}

fn tools_only(params: &Value) -> Value {
    let mut only = Map::new();
    only.insert("messages".into(), json!([]));
    only.insert("maxTokens".into(), json!(1));
    for field in ["tools", "toolChoice"] {
        if let Some(value) = params.get(field) {
            only.insert(field.into(), value.clone());
        }
    }
    envelope(Value::Object(only))
}

// ---------------------------------------------------------------- generators

fn atom() -> impl Strategy<Value = Value> {
    prop::sample::select(vec![
        Value::Null,
        json!(true),
        json!(false),
        json!(0),
        json!(1),
        json!(-1),
        json!(2.0),
        json!(0.5),
        json!(1.5),
        json!(-0.0),
        json!(1e300),
        json!("x"),
        json!(""),
        json!("user"),
        json!("assistant"),
        json!("system"),
        json!("text"),
        json!("image"),
        json!("tool_use"),
        json!("tool_result"),
        json!("resource"),
        json!("object"),
        json!("auto"),
        json!("none"),
        json!("required"),
        json!("sometimes"),
        json!("dark"),
        json!("allServers"),
        json!([]),
        json!({}),
        json!(["x"]),
        json!([{}]),
        json!({"type": "text", "text": "t"}),
        json!({"x": 1}),
    ])
}

/// Member names the mutations add: the schema's own, and one it does not know.
const NAMES: &[&str] = &[
    "type",
    "text",
    "data",
    "mimeType",
    "role",
    "content",
    "name",
    "input",
    "id",
    "toolUseId",
    "isError",
    "structuredContent",
    "annotations",
    "_meta",
    "audience",
    "priority",
    "lastModified",
    "uri",
    "blob",
    "resource",
    "icons",
    "src",
    "theme",
    "sizes",
    "size",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "properties",
    "required",
    "$schema",
    "execution",
    "taskSupport",
    "mode",
    "hints",
    "costPriority",
    "speedPriority",
    "task",
    "ttl",
    "progressToken",
    "metadata",
    "tools",
    "toolChoice",
    "maxTokens",
    "messages",
    "systemPrompt",
    "includeContext",
    "temperature",
    "stopSequences",
    "modelPreferences",
    "extra",
];

/// An object of these members, each present or not.
fn some_of(members: Vec<(&'static str, BoxedStrategy<Value>)>) -> BoxedStrategy<Value> {
    members
        .into_iter()
        .map(|(name, value)| {
            prop::option::weighted(0.5, value)
                .prop_map(move |v| v.map(|v| (name, v)))
                .boxed()
        })
        .collect::<Vec<_>>()
        .prop_map(|members| {
            Value::Object(
                members
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect(),
            )
        })
        .boxed()
}

/// `required` merged with a random choice of `optional`.
fn object_with(
    required: Vec<(&'static str, Value)>,
    optional: Vec<(&'static str, BoxedStrategy<Value>)>,
) -> BoxedStrategy<Value> {
    some_of(optional)
        .prop_map(move |mut value| {
            if let Value::Object(members) = &mut value {
                for (name, v) in &required {
                    members.insert((*name).to_owned(), v.clone());
                }
            }
            value
        })
        .boxed()
}

fn annotations() -> BoxedStrategy<Value> {
    some_of(vec![
        (
            "audience",
            prop::sample::select(vec![
                json!(["user"]),
                json!(["user", "assistant"]),
                json!([]),
            ])
            .boxed(),
        ),
        (
            "priority",
            prop::sample::select(vec![json!(0), json!(0.3), json!(1)]).boxed(),
        ),
        ("lastModified", Just(json!("2025-01-12T15:00:58Z")).boxed()),
    ])
}

fn meta() -> BoxedStrategy<Value> {
    prop::sample::select(vec![json!({}), json!({"k": [1, null]})]).boxed()
}

fn text_block() -> BoxedStrategy<Value> {
    object_with(
        vec![("type", json!("text")), ("text", json!("hello"))],
        vec![("annotations", annotations()), ("_meta", meta())],
    )
}

fn media_block(kind: &'static str) -> BoxedStrategy<Value> {
    object_with(
        vec![
            ("type", json!(kind)),
            ("data", json!("AAAA")),
            ("mimeType", json!("image/png")),
        ],
        vec![("annotations", annotations()), ("_meta", meta())],
    )
}

fn icon() -> BoxedStrategy<Value> {
    object_with(
        vec![("src", json!("https://example.com/i.png"))],
        vec![
            ("mimeType", Just(json!("image/png")).boxed()),
            ("sizes", Just(json!(["48x48"])).boxed()),
            (
                "theme",
                prop::sample::select(vec![json!("light"), json!("dark")]).boxed(),
            ),
        ],
    )
}

fn content_block() -> BoxedStrategy<Value> {
    prop_oneof![
        text_block(),
        media_block("image"),
        media_block("audio"),
        object_with(
            vec![
                ("type", json!("resource_link")),
                ("name", json!("r")),
                ("uri", json!("file:///r")),
            ],
            vec![
                ("title", Just(json!("R")).boxed()),
                ("description", Just(json!("d")).boxed()),
                ("mimeType", Just(json!("text/plain")).boxed()),
                (
                    "size",
                    prop::sample::select(vec![json!(10), json!(10.0)]).boxed()
                ),
                (
                    "icons",
                    prop::collection::vec(icon(), 0..2)
                        .prop_map(Value::Array)
                        .boxed()
                ),
                ("annotations", annotations()),
                ("_meta", meta()),
            ],
        ),
        object_with(
            vec![("type", json!("resource"))],
            vec![
                (
                    "resource",
                    prop::sample::select(vec![
                        json!({"uri": "file:///a", "text": "t"}),
                        json!({"uri": "file:///b", "blob": "AAAA", "mimeType": "x/y"}),
                        json!({"uri": "file:///c"}),
                    ])
                    .boxed(),
                ),
                ("annotations", annotations()),
            ],
        ),
    ]
    .boxed()
}

fn sampling_block() -> BoxedStrategy<Value> {
    prop_oneof![
        3 => text_block(),
        1 => media_block("image"),
        1 => media_block("audio"),
        1 => object_with(
            vec![
                ("type", json!("tool_use")),
                ("id", json!("call-1")),
                ("name", json!("search")),
                ("input", json!({"q": "x"})),
            ],
            vec![("_meta", meta())],
        ),
        1 => object_with(
            vec![("type", json!("tool_result")), ("toolUseId", json!("call-1"))],
            vec![
                ("content", prop::collection::vec(content_block(), 0..3).prop_map(Value::Array).boxed()),
                ("isError", prop::sample::select(vec![json!(true), json!(false)]).boxed()),
                (
                    "structuredContent",
                    prop::sample::select(vec![json!({"a": 1}), json!([1]), json!("s")]).boxed(),
                ),
                ("_meta", meta()),
            ],
        ),
    ]
    .boxed()
}

fn message() -> BoxedStrategy<Value> {
    (
        prop::sample::select(vec![json!("user"), json!("assistant")]),
        prop_oneof![
            2 => sampling_block(),
            1 => prop::collection::vec(sampling_block(), 0..3).prop_map(Value::Array),
        ],
        prop::option::weighted(0.2, meta()),
    )
        .prop_map(|(role, content, meta)| {
            let mut message = json!({"role": role, "content": content});
            if let Some(meta) = meta {
                message["_meta"] = meta;
            }
            message
        })
        .boxed()
}

fn json_value() -> BoxedStrategy<Value> {
    let leaf = prop::sample::select(vec![
        json!("s"),
        json!(3),
        json!(true),
        json!(2.5),
        Value::Null,
        json!(4.0),
    ]);
    leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[a-c]", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
    .boxed()
}

fn tool_schema() -> BoxedStrategy<Value> {
    object_with(
        vec![("type", json!("object"))],
        vec![
            (
                "properties",
                prop::sample::select(vec![
                    json!({}),
                    json!({"q": {"type": "string"}}),
                    json!({"q": 1}),
                ])
                .boxed(),
            ),
            ("required", Just(json!(["q"])).boxed()),
            (
                "$schema",
                Just(json!("https://json-schema.org/draft/2020-12/schema")).boxed(),
            ),
        ],
    )
}

fn tool() -> BoxedStrategy<Value> {
    object_with(
        vec![("name", json!("search"))],
        vec![
            ("inputSchema", tool_schema()),
            ("outputSchema", tool_schema()),
            ("title", Just(json!("Search")).boxed()),
            ("description", Just(json!("Searches")).boxed()),
            (
                "icons",
                prop::collection::vec(icon(), 0..2)
                    .prop_map(Value::Array)
                    .boxed(),
            ),
            (
                "annotations",
                some_of(vec![
                    ("title", Just(json!("t")).boxed()),
                    ("readOnlyHint", Just(json!(true)).boxed()),
                    ("destructiveHint", Just(json!(false)).boxed()),
                    ("idempotentHint", Just(json!(true)).boxed()),
                    ("openWorldHint", Just(json!(false)).boxed()),
                ]),
            ),
            (
                "execution",
                prop::sample::select(vec![json!({"taskSupport": "optional"}), json!({})]).boxed(),
            ),
            ("_meta", meta()),
        ],
    )
}

fn params() -> BoxedStrategy<Value> {
    object_with(
        vec![],
        vec![
            (
                "messages",
                prop::collection::vec(message(), 0..3)
                    .prop_map(Value::Array)
                    .boxed(),
            ),
            (
                "maxTokens",
                prop::sample::select(vec![json!(1), json!(100), json!(5.0), json!(0), json!(-3)])
                    .boxed(),
            ),
            ("systemPrompt", Just(json!("be brief")).boxed()),
            (
                "includeContext",
                prop::sample::select(vec![
                    json!("none"),
                    json!("thisServer"),
                    json!("allServers"),
                ])
                .boxed(),
            ),
            (
                "temperature",
                prop::sample::select(vec![json!(0.2), json!(1)]).boxed(),
            ),
            ("stopSequences", Just(json!(["\n"])).boxed()),
            (
                "metadata",
                prop::collection::btree_map("[a-c]", json_value(), 0..3)
                    .prop_map(|m| Value::Object(m.into_iter().collect()))
                    .boxed(),
            ),
            (
                "modelPreferences",
                some_of(vec![
                    (
                        "hints",
                        prop::sample::select(vec![
                            json!([{"name": "claude"}, {}]),
                            json!([]),
                            json!([{"name": "gpt", "x": 1}]),
                        ])
                        .boxed(),
                    ),
                    (
                        "costPriority",
                        prop::sample::select(vec![json!(0), json!(0.5), json!(1)]).boxed(),
                    ),
                    ("speedPriority", Just(json!(1.0)).boxed()),
                    ("intelligencePriority", Just(json!(0.9)).boxed()),
                ]),
            ),
            (
                "tools",
                prop::collection::vec(tool(), 0..2)
                    .prop_map(Value::Array)
                    .boxed(),
            ),
            (
                "toolChoice",
                prop::sample::select(vec![
                    json!({"mode": "auto"}),
                    json!({"mode": "required"}),
                    json!({"mode": "none"}),
                    json!({}),
                ])
                .boxed(),
            ),
            (
                "task",
                prop::sample::select(vec![json!({"ttl": 60000}), json!({})]).boxed(),
            ),
            (
                "_meta",
                prop::sample::select(vec![
                    json!({}),
                    json!({"progressToken": "p"}),
                    json!({"progressToken": 3}),
                ])
                .boxed(),
            ),
        ],
    )
    .prop_map(|mut params| {
        // Mostly the required members, so the mutations reach deeper.
        if let Value::Object(members) = &mut params {
            members.entry("messages").or_insert_with(|| json!([]));
            members.entry("maxTokens").or_insert_with(|| json!(50));
        }
        params
    })
    .boxed()
}

/// Every node of `value` by its path of keys and indices.
fn paths(value: &Value, at: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    out.push(at.clone());
    match value {
        Value::Object(members) => {
            for (key, child) in members {
                at.push(Step::Key(key.clone()));
                paths(child, at, out);
                at.pop();
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                at.push(Step::Index(index));
                paths(child, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

#[derive(Debug, Clone)]
enum Step {
    Key(String),
    Index(usize),
}

fn node_mut<'v>(value: &'v mut Value, path: &[Step]) -> Option<&'v mut Value> {
    path.iter().try_fold(value, |node, step| match step {
        Step::Key(key) => node.get_mut(key.as_str()),
        Step::Index(index) => node.get_mut(*index),
    })
}

#[derive(Debug, Clone)]
enum Mutation {
    Replace(Value),
    Remove,
    Add(&'static str, Value),
}

fn mutation() -> impl Strategy<Value = (prop::sample::Index, Mutation)> {
    (
        any::<prop::sample::Index>(),
        prop_oneof![
            3 => atom().prop_map(Mutation::Replace),
            2 => Just(Mutation::Remove),
            2 => (prop::sample::select(NAMES), atom()).prop_map(|(n, v)| Mutation::Add(n, v)),
        ],
    )
}

fn mutate(mut value: Value, mutations: &[(prop::sample::Index, Mutation)]) -> Value {
    for (index, mutation) in mutations {
        let mut all = Vec::new();
        paths(&value, &mut Vec::new(), &mut all);
        let path = index.get(&all).clone();
        match mutation {
            Mutation::Replace(atom) => {
                if let Some(node) = node_mut(&mut value, &path) {
                    *node = atom.clone();
                }
            }
            Mutation::Remove => {
                if let Some((last, parent)) = path.split_last()
                    && let Some(parent) = node_mut(&mut value, parent)
                {
                    match (last, parent) {
                        (Step::Key(key), Value::Object(members)) => {
                            members.remove(key);
                        }
                        (Step::Index(index), Value::Array(items)) => {
                            items.remove(*index);
                        }
                        _ => {}
                    }
                }
            }
            Mutation::Add(name, atom) => {
                if let Some(Value::Object(members)) = node_mut(&mut value, &path) {
                    members.insert((*name).to_owned(), atom.clone());
                }
            }
        }
    }
    value
}

fn cases() -> impl Strategy<Value = Value> {
    (params(), prop::collection::vec(mutation(), 0..4))
        .prop_map(|(params, mutations)| mutate(params, &mutations))
}

// ---------------------------------------------------------------- the property

#[test]
fn validation_accepts_exactly_what_the_published_schema_accepts() {
    let Some(python) = python_with_jsonschema() else {
        return;
    };
    let seed: u64 = std::env::var("MCPOLICY_SCHEMA_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        });
    let count: usize = std::env::var("MCPOLICY_SCHEMA_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1500);
    eprintln!("MCPOLICY_SCHEMA_SEED={seed}");
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        proptest::test_runner::Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    );
    let strategy = cases();
    let mut requests: Vec<(ProtocolRevision, Value)> = Vec::new();
    for _ in 0..count {
        let params = strategy.new_tree(&mut runner).expect("a case").current();
        for revision in ProtocolRevision::ALL {
            requests.push((revision, params.clone()));
        }
    }
    let mut asked: Vec<(ProtocolRevision, Value)> = requests
        .iter()
        .map(|(revision, params)| (*revision, envelope(params.clone())))
        .collect();
    asked.extend(
        requests
            .iter()
            .map(|(_, params)| (ProtocolRevision::V2025_11_25, tools_only(params))),
    );
    let verdicts = schema_accepts(&python, &asked);
    let (schema, tools_2025_11_25) = verdicts.split_at(requests.len());
    let mut accepted = 0usize;
    let mut refused_by_schema = 0usize;
    for (index, (revision, params)) in requests.iter().enumerate() {
        let expected = schema[index] && !stricter(*revision, params, tools_2025_11_25[index]);
        let ours = validate_sampling_for(envelope(params.clone()), *revision);
        assert_eq!(
            ours.is_ok(),
            expected,
            "MCPOLICY_SCHEMA_SEED={seed}: under {}, the schema says {} and the runtime says {:?} of\n{}",
            revision.as_str(),
            if schema[index] { "valid" } else { "invalid" },
            ours.as_ref().map(|_| "valid").map_err(ToString::to_string),
            serde_json::to_string_pretty(params).unwrap_or_default(),
        );
        if let Err(error) = &ours {
            assert_eq!(error.code(), -32602, "{error}");
        }
        accepted += usize::from(expected);
        refused_by_schema += usize::from(!schema[index]);
    }
    // The generator must reach both sides, or the property proves little.
    assert!(
        accepted > requests.len() / 5 && refused_by_schema > requests.len() / 5,
        "accepted {accepted}, refused by the schema {refused_by_schema} of {}",
        requests.len()
    );
}

/// The examples that were accepted before validation followed the schema.
#[test]
fn the_cases_that_were_let_through_are_refused() {
    let cases = [
        (
            json!([{"role": "system", "content": {"type": "text", "text": "x"}}]),
            None,
        ),
        (json!([{}]), None),
        (
            json!([{"role": 7, "content": {"type": "text", "text": "x"}}]),
            None,
        ),
        (json!([{"role": "user", "content": {"type": "text"}}]), None),
        (
            json!([{"role": "user", "content": {"type": "video", "data": "x"}}]),
            None,
        ),
        (
            json!([]),
            Some(("toolChoice", json!({"mode": "sometimes"}))),
        ),
        (json!([]), Some(("tools", json!([{"name": "x"}])))),
        (json!([]), Some(("maxTokens", json!(0)))),
    ];
    for revision in ProtocolRevision::ALL {
        for (messages, extra) in &cases {
            let mut params = json!({"messages": messages, "maxTokens": 10});
            if let Some((field, value)) = extra {
                params[*field] = value.clone();
            }
            let error = validate_sampling_for(envelope(params.clone()), revision)
                .expect_err(&format!("{}: {params} must be refused", revision.as_str()));
            assert_eq!(error.code(), -32602, "{error}");
        }
    }
    // Arrays of content and tool_use blocks are 2025-11-25's, not 2025-06-18's.
    let array = json!({"messages": [{"role": "assistant", "content": [
        {"type": "tool_use", "id": "c", "name": "search", "input": {}}]}], "maxTokens": 10});
    assert!(validate_sampling_for(envelope(array.clone()), ProtocolRevision::V2025_06_18).is_err());
    assert!(validate_sampling_for(envelope(array.clone()), ProtocolRevision::V2025_11_25).is_ok());
    assert!(validate_sampling_for(envelope(array), ProtocolRevision::V2026_07_28).is_ok());
    let error = validate_sampling_for(
        envelope(json!({"messages": [], "maxTokens": 10, "toolChoice": {"mode": "sometimes"}})),
        ProtocolRevision::V2025_11_25,
    )
    .expect_err("an unknown mode");
    assert_eq!(
        error.to_string(),
        r#"$.params.toolChoice.mode must be one of "auto", "required", "none", got "sometimes""#
    );
    let error = validate_sampling_for(
        envelope(json!({"messages": [{"role": "system", "content": {"type": "text", "text": "x"}}], "maxTokens": 10})),
        ProtocolRevision::V2025_11_25,
    )
    .expect_err("a system role");
    assert_eq!(
        error.to_string(),
        r#"$.params.messages[0].role must be "user" or "assistant", got "system""#
    );
}

// ------------------------------------------------- error paths name a node

/// A step of an error's JSON path as the runtime writes it: `.name`,
/// `["name"]` (a JSON string with `\u` escapes) or `[index]`.
fn parse_path(path: &str) -> Option<Vec<Step>> {
    let mut rest = path.strip_prefix('$')?;
    let mut steps = Vec::new();
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            steps.push(Step::Key(after[..end].to_owned()));
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix("[\"") {
            // The key's JSON string: up to the first unescaped quote.
            let mut end = 0;
            let bytes = after.as_bytes();
            while bytes.get(end)? != &b'"' {
                end += if bytes[end] == b'\\' { 2 } else { 1 };
            }
            let key: String = serde_json::from_str(&format!("\"{}\"", &after[..end])).ok()?;
            steps.push(Step::Key(key));
            rest = after.get(end + 1..)?.strip_prefix(']')?;
        } else {
            let after = rest.strip_prefix('[')?;
            let end = after.find(']')?;
            steps.push(Step::Index(after[..end].parse().ok()?));
            rest = &after[end + 1..];
        }
    }
    Some(steps)
}

fn node<'v>(value: &'v Value, path: &[Step]) -> Option<&'v Value> {
    path.iter().try_fold(value, |node, step| match step {
        Step::Key(key) => node.get(key.as_str()),
        Step::Index(index) => node.get(*index),
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Every refusal of a request's params names a node of that request:
    /// the member that is wrong (when the error says what was found), or a
    /// member missing from an object the request has (when it says none
    /// was). A path that names nothing would send a server's developer to
    /// look for a member that is not there.
    #[test]
    fn an_error_path_names_a_node_of_the_request(params in cases()) {
        let request = envelope(params);
        for revision in ProtocolRevision::ALL {
            let Err(error) = validate_sampling_for(request.clone(), revision) else {
                continue;
            };
            let (path, found) = match &error {
                mcpolicy_runtime::request::RequestError::InvalidParams { path, found, .. }
                | mcpolicy_runtime::request::RequestError::InvalidEnvelope { path, found, .. } => {
                    (path, found)
                }
                other => {
                    prop_assert!(false, "a request parsed as JSON refused for {other}");
                    unreachable!()
                }
            };
            let steps = parse_path(path);
            prop_assert!(steps.is_some(), "an unreadable path {path} ({error})");
            let steps = steps.unwrap_or_default();
            match found {
                Some(_) => prop_assert!(
                    node(&request, &steps).is_some(),
                    "{path} names no node of {request} ({error})"
                ),
                None => {
                    let (last, parent) = steps.split_last().unwrap_or((&Step::Index(0), &[]));
                    let parent = node(&request, parent);
                    prop_assert!(
                        matches!((last, parent), (Step::Key(key), Some(Value::Object(members))) if !members.contains_key(key)),
                        "{path} names no missing member of an object of {request} ({error})"
                    );
                }
            }
        }
    }
}

#[test]
fn an_error_path_is_read_as_written() {
    let steps = parse_path(r#"$.params.messages[2]["a.b"]["\u00e9\"x"].c"#).unwrap_or_default();
    let keys: Vec<String> = steps
        .iter()
        .map(|step| match step {
            Step::Key(key) => format!("k:{key}"),
            Step::Index(index) => format!("i:{index}"),
        })
        .collect();
    assert_eq!(
        keys,
        [
            "k:params",
            "k:messages",
            "i:2",
            "k:a.b",
            "k:\u{e9}\"x",
            "k:c"
        ]
    );
}
