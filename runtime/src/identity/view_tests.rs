//! The canonical writer, the presentation-normal form and the identity
//! keys read through the JSON view must give a [`Node`] exactly what they
//! give the [`Value`] it stands for (`docs/spec/identity.md`): a request
//! decided from the strict reader's tree has the same canonical bytes,
//! refusal key and approval key as one an SDK parsed. These tests hold the
//! two instantiations to each other, with each `Node`'s members shuffled
//! (a `Value`'s map iterates in byte order, a `Node`'s in document order).

use std::borrow::Cow;

use proptest::prelude::*;
use serde_json::{Map, Number, Value, json};
use unicode_normalization::UnicodeNormalization;

use super::normal::normal_fields;
use super::{
    RECURSION, Writer, approval_key, approval_key_of, canonical_bytes, identity_of, looked_up,
    refusal_key, refusal_key_of, request_identity, write_canonical_of,
};
use crate::json::{Json, Members, Node};
use crate::table::DEFAULT_IDENTITY;

// ---- building a Node from a Value -----------------------------------------

/// Steps `state` (a 64-bit LCG) and returns its high bits.
fn next(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    *state >> 33
}

/// `value` as a [`Node`] whose objects list their members in another
/// order than the map's byte order: by `seed`, each object's reversed,
/// kept, or shuffled. Strings are owned, as the reader's are after an
/// escape.
fn node_of(value: &Value, seed: u64) -> Node<'static> {
    let mut state = seed;
    node_with(value, &mut state)
}

fn node_with(value: &Value, state: &mut u64) -> Node<'static> {
    match value {
        Value::Null => Node::Null,
        Value::Bool(b) => Node::Bool(*b),
        Value::Number(n) => Node::Number(n.clone()),
        Value::String(s) => Node::String(Cow::Owned(s.clone())),
        Value::Array(items) => {
            Node::Array(items.iter().map(|item| node_with(item, state)).collect())
        }
        Value::Object(map) => {
            let mut members: Vec<(Cow<'static, str>, Node<'static>)> = map
                .iter()
                .map(|(key, item)| (Cow::Owned(key.clone()), node_with(item, state)))
                .collect();
            match next(state) % 4 {
                0 => members.reverse(),
                1 => {}
                _ => {
                    for i in (1..members.len()).rev() {
                        let j = (next(state) % (i as u64 + 1)) as usize;
                        members.swap(i, j);
                    }
                }
            }
            Node::Object(Members(members))
        }
    }
}

fn members_of(node: Node<'static>) -> Members<'static> {
    match node {
        Node::Object(members) => members,
        other => panic!("not an object: {other:?}"),
    }
}

/// An object of `entries`, keys distinct after NFC as the strict reader
/// requires of a [`Node`] (the first of two NFC-equal keys kept).
fn object_of(entries: Vec<(String, Value)>) -> Value {
    let mut seen: Vec<String> = Vec::new();
    let mut map = Map::new();
    for (key, value) in entries {
        let normal: String = key.nfc().collect();
        if seen.contains(&normal) {
            continue;
        }
        seen.push(normal);
        map.insert(key, value);
    }
    Value::Object(map)
}

// ---- writing both ----------------------------------------------------------

/// Canonical bytes of `value` through the writer with the given trust in
/// an object's byte order and recursion limit.
fn canonical_with<J: Json>(value: &J, trust_order: bool, recursion: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let mut writer = Writer::new(&mut out);
    writer.trust_order = trust_order;
    writer.recursion = recursion;
    writer.value(value);
    writer.flush();
    out
}

fn canonical_of<J: Json>(value: &J) -> Vec<u8> {
    let mut out = Vec::new();
    write_canonical_of(value, &mut out);
    out
}

/// Both instantiations of the identity keys and the normal form agree on
/// `params` for `fields`.
fn assert_keys_agree(
    server: &str,
    params: &Map<String, Value>,
    node: &Members<'_>,
    fields: &[&str],
) {
    let by_value = refusal_key_of(server, params, fields);
    assert_eq!(by_value, refusal_key(server, params, fields));
    assert_eq!(
        by_value,
        refusal_key_of(server, node, fields),
        "refusal key, fields {fields:?}"
    );
    assert_eq!(
        identity_of(server, looked_up(params, fields)),
        identity_of(server, looked_up(node, fields)),
        "request identity, fields {fields:?}"
    );

    let normal_value: Vec<(&str, Value)> = normal_fields(params, fields)
        .into_iter()
        .map(|(field, value)| (field, value.to_value()))
        .collect();
    let normal_node: Vec<(&str, Value)> = normal_fields(node, fields)
        .into_iter()
        .map(|(field, value)| (field, value.to_value()))
        .collect();
    assert_eq!(normal_value, normal_node, "normal form, fields {fields:?}");
}

// ---- strategies --------------------------------------------------------------

/// Characters for keys and strings: ASCII (most), quotes, backslashes and
/// controls (escaped), Latin-1 (inert), combining marks (`e` + U+0301 is
/// NFD `é`), default-ignorables (dropped by the normal form), white space
/// (trimmed by it), astral and private-use (UTF-16 order).
fn interesting_char() -> impl Strategy<Value = char> {
    prop_oneof![
        6 => proptest::char::range('a', 'f'),
        2 => proptest::char::range(' ', '~'),
        1 => prop::sample::select(vec!['"', '\\', '\n', '\t', '\r', '\u{0}', '\u{1f}', '\u{7f}']),
        2 => prop::sample::select(vec!['é', 'e', '\u{301}', '\u{308}', 'ü', 'Å', '\u{212b}', '\u{e9}']),
        2 => prop::sample::select(vec![
            '\u{200b}', '\u{200d}', '\u{ad}', '\u{feff}', '\u{fe0f}', '\u{2066}', '\u{e0041}',
            '\u{3164}', ' ', '\u{a0}', '\u{2028}'
        ]),
        1 => prop::sample::select(vec![
            '\u{e000}', '\u{ffff}', '\u{1f600}', '\u{10000}', '\u{ac00}', '\u{1100}', '\u{4e00}'
        ]),
    ]
}

fn interesting_string() -> BoxedStrategy<String> {
    prop_oneof![
        4 => proptest::collection::vec(interesting_char(), 0..10)
            .prop_map(|chars| chars.into_iter().collect::<String>()),
        // Longer strings cross the writer's chunks and its buffer.
        1 => (proptest::collection::vec(interesting_char(), 1..40), 1usize..80)
            .prop_map(|(chars, repeat)| chars.into_iter().collect::<String>().repeat(repeat)),
    ]
    .boxed()
}

/// Keys: mostly short ASCII (the in-place sort), some not (entries).
fn key() -> BoxedStrategy<String> {
    prop_oneof![
        3 => "[a-z]{0,4}",
        1 => "[ -~]{0,12}",
        1 => prop::sample::select(vec!["role", "content", "type", "text", "_meta", "a\"b", "z\\"])
            .prop_map(str::to_owned),
        2 => interesting_string(),
    ]
    .boxed()
}

fn number() -> BoxedStrategy<Value> {
    prop_oneof![
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1000i64..1000).prop_map(Value::from),
        (-4i64..4).prop_map(|d| Value::from((1i64 << 53) + d)),
        any::<u64>().prop_filter_map("finite", |bits| {
            Number::from_f64(f64::from_bits(bits)).map(Value::Number)
        }),
        (1u32..10, -330i32..310).prop_filter_map("finite", |(m, e)| {
            Number::from_f64(format!("{m}e{e}").parse::<f64>().ok()?).map(Value::Number)
        }),
        (-1_000_000i64..1_000_000, 0u32..9).prop_filter_map("finite", |(m, e)| {
            Number::from_f64(m as f64 / 10f64.powi(e as i32)).map(Value::Number)
        }),
    ]
    .boxed()
}

fn leaf() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        interesting_string().prop_map(Value::String),
    ]
    .boxed()
}

fn json_value() -> BoxedStrategy<Value> {
    leaf()
        .prop_recursive(5, 64, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::vec((key(), inner), 0..8).prop_map(object_of),
            ]
        })
        .boxed()
}

/// Text as a prompt holds it: words, with invisible characters, accents
/// written either way and white space around them now and then.
fn prompt_text() -> BoxedStrategy<String> {
    prop_oneof![
        2 => prop::sample::select(vec!["hello", "user", "assistant", "none", "Summarise the notes"])
            .prop_map(str::to_owned),
        3 => interesting_string(),
        1 => (interesting_string(), prop::sample::select(vec![" ", "\u{200b}", "\n", "\u{feff}"]))
            .prop_map(|(text, pad)| format!("{pad}{text}{pad}")),
    ]
    .boxed()
}

/// A content block of any type the normal form knows, or another, with
/// members it keeps and members it drops (`_meta`, `annotations`, ids,
/// `isError`, members of other types, unknown ones).
fn block() -> BoxedStrategy<Value> {
    const TYPES: &[&str] = &[
        "text",
        "image",
        "audio",
        "tool_use",
        "tool_result",
        "resource",
        "resource_link",
        "video",
    ];
    const KEYS: &[&str] = &[
        "text",
        "data",
        "mimeType",
        "name",
        "input",
        "content",
        "structuredContent",
        "isError",
        "resource",
        "uri",
        "title",
        "description",
        "_meta",
        "annotations",
        "id",
        "toolUseId",
        "extra",
    ];
    let resource = proptest::collection::vec(
        (
            prop::sample::select(vec!["uri", "mimeType", "text", "blob", "_meta", "size"]),
            prompt_text().prop_map(Value::String),
        ),
        0..5,
    )
    .prop_map(|members| {
        object_of(
            members
                .into_iter()
                .map(|(key, value)| (key.to_owned(), value))
                .collect(),
        )
    });
    let value = prop_oneof![
        3 => prompt_text().prop_map(Value::String),
        2 => any::<bool>().prop_map(Value::Bool),
        1 => leaf(),
        1 => resource,
        1 => json_value(),
    ];
    let flat = (
        prop::option::weighted(0.9, prop::sample::select(TYPES)),
        proptest::collection::vec((prop::sample::select(KEYS), value.clone()), 0..7),
    )
        .prop_map(make_block);
    flat.prop_recursive(3, 24, 4, move |inner| {
        (
            prop::option::weighted(0.9, prop::sample::select(TYPES)),
            proptest::collection::vec(
                (
                    prop::sample::select(KEYS),
                    prop_oneof![
                        2 => value.clone(),
                        1 => inner.clone(),
                        1 => proptest::collection::vec(inner, 0..3).prop_map(Value::Array),
                    ],
                ),
                0..7,
            ),
        )
            .prop_map(make_block)
    })
    .boxed()
}

fn make_block((kind, members): (Option<&str>, Vec<(&str, Value)>)) -> Value {
    let mut entries: Vec<(String, Value)> = Vec::new();
    if let Some(kind) = kind {
        entries.push(("type".to_owned(), Value::from(kind)));
    }
    entries.extend(
        members
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value)),
    );
    object_of(entries)
}

fn message() -> BoxedStrategy<Value> {
    let content = prop_oneof![
        2 => block(),
        2 => proptest::collection::vec(block(), 0..4).prop_map(Value::Array),
        1 => leaf(),
    ];
    prop_oneof![
        8 => (
            prop::option::weighted(0.9, prompt_text()),
            prop::option::weighted(0.9, content),
            prop::option::of(json_value()),
            prop::option::of((key(), leaf())),
        )
            .prop_map(|(role, content, meta, extra)| {
                let mut entries = Vec::new();
                entries.extend(role.map(|role| ("role".to_owned(), Value::String(role))));
                entries.extend(content.map(|content| ("content".to_owned(), content)));
                entries.extend(meta.map(|meta| ("_meta".to_owned(), meta)));
                entries.extend(extra);
                object_of(entries)
            }),
        1 => leaf(),
    ]
    .boxed()
}

fn model_preferences() -> BoxedStrategy<Value> {
    let hint = prop_oneof![
        4 => (prompt_text(), prop::option::of((key(), leaf()))).prop_map(|(name, extra)| {
            let mut entries = vec![("name".to_owned(), Value::String(name))];
            entries.extend(extra);
            object_of(entries)
        }),
        1 => leaf(),
    ];
    let hints = prop_oneof![
        3 => proptest::collection::vec(hint, 0..4).prop_map(Value::Array),
        1 => Just(json!([])),
        1 => leaf(),
    ];
    prop_oneof![
        6 => (
            prop::option::weighted(0.8, hints),
            prop::option::of(number()),
            prop::option::of(number()),
            prop::option::of(json_value()),
        )
            .prop_map(|(hints, cost, speed, meta)| {
                let mut entries = Vec::new();
                entries.extend(hints.map(|hints| ("hints".to_owned(), hints)));
                entries.extend(cost.map(|cost| ("costPriority".to_owned(), cost)));
                entries.extend(speed.map(|speed| ("speedPriority".to_owned(), speed)));
                entries.extend(meta.map(|meta| ("_meta".to_owned(), meta)));
                object_of(entries)
            }),
        1 => json_value(),
    ]
    .boxed()
}

/// `sampling/createMessage` params: each member present or not, shaped as
/// the schema has it or (now and then) anything.
fn sampling_params() -> BoxedStrategy<Value> {
    let messages = prop_oneof![
        6 => proptest::collection::vec(message(), 0..4).prop_map(Value::Array),
        1 => json_value(),
    ];
    let system_prompt = prop_oneof![
        4 => prompt_text().prop_map(Value::String),
        1 => json_value(),
    ];
    let include_context = prop_oneof![
        4 => prop::sample::select(vec!["none", "thisServer", "allServers", " none", "None"])
            .prop_map(Value::from),
        1 => leaf(),
    ];
    (
        (
            prop::option::weighted(0.9, messages),
            prop::option::of(system_prompt),
            prop::option::of(include_context),
            prop::option::of(model_preferences()),
        ),
        (
            prop::option::of(number()),
            prop::option::of(number()),
            prop::option::of(json_value()),
            prop::option::of(json_value()),
            proptest::collection::vec((key(), json_value()), 0..3),
        ),
    )
        .prop_map(
            |((messages, system, context, preferences), (max, temperature, meta, task, extra))| {
                let mut entries = Vec::new();
                entries.extend(messages.map(|v| ("messages".to_owned(), v)));
                entries.extend(system.map(|v| ("systemPrompt".to_owned(), v)));
                entries.extend(context.map(|v| ("includeContext".to_owned(), v)));
                entries.extend(preferences.map(|v| ("modelPreferences".to_owned(), v)));
                entries.extend(max.map(|v| ("maxTokens".to_owned(), v)));
                entries.extend(temperature.map(|v| ("temperature".to_owned(), v)));
                entries.extend(meta.map(|v| ("_meta".to_owned(), v)));
                entries.extend(task.map(|v| ("task".to_owned(), v)));
                entries.extend(extra);
                object_of(entries)
            },
        )
        .boxed()
}

/// Identity field lists: the default, all the fields a policy may list,
/// unknown fields, duplicates, a field in NFD, none.
fn field_lists() -> Vec<Vec<&'static str>> {
    vec![
        DEFAULT_IDENTITY.to_vec(),
        crate::table::IDENTITY_FIELDS.to_vec(),
        vec!["messages", "maxTokens", "nope", "_meta", "task"],
        vec![
            "messages",
            "systemPrompt",
            "messages",
            "systemPrompt",
            "modelPreferences",
        ],
        vec!["includeContext", "caf\u{e9}", "cafe\u{301}", "e\u{301}"],
        vec!["modelPreferences"],
        vec![],
    ]
}

/// A value nested `levels.len()` containers deep (deeper than
/// [`RECURSION`]: the writer's explicit stack), each level an array or an
/// object with ASCII keys out of order or with keys that are not ASCII.
fn nested(levels: &[u8], leaf: Value) -> Value {
    let mut value = leaf;
    for (i, level) in levels.iter().enumerate() {
        value = match level % 4 {
            0 => Value::Array(vec![Value::from(i), value]),
            1 => json!({"role": i, "content": value, "_meta": {"b": 1, "a": [2]}}),
            2 => json!({"e\u{301}": i, "z": value, "\u{e000}": "x", "\u{1f600}": null}),
            _ => json!({"inner": [value], "a\"b": "c\u{200b}"}),
        };
    }
    value
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn node_and_value_write_the_same_canonical_bytes(
        value in json_value(),
        seed in any::<u64>(),
        recursion in prop::sample::select(vec![0u32, 1, 2, 3, RECURSION]),
    ) {
        let node = node_of(&value, seed);
        let expected = canonical_bytes(&value);
        prop_assert_eq!(&canonical_of(&value), &expected);
        prop_assert_eq!(&canonical_of(&node), &expected);
        // The explicit stack, and a Value's byte order not trusted.
        prop_assert_eq!(&canonical_with(&node, true, recursion), &expected);
        prop_assert_eq!(&canonical_with(&value, false, recursion), &expected);
    }

    #[test]
    fn node_and_value_nested_past_the_recursion_limit_write_alike(
        levels in proptest::collection::vec(any::<u8>(), (RECURSION as usize + 1)..(RECURSION as usize + 64)),
        leaf in json_value(),
        seed in any::<u64>(),
    ) {
        let value = nested(&levels, leaf);
        let node = node_of(&value, seed);
        let expected = canonical_with(&value, false, 0);
        prop_assert_eq!(&canonical_of(&value), &expected);
        prop_assert_eq!(&canonical_of(&node), &expected);
        prop_assert_eq!(&canonical_with(&node, true, 0), &expected);
    }

    #[test]
    fn node_and_value_have_the_same_keys_and_normal_form(
        params in sampling_params(),
        seed in any::<u64>(),
        server in prop_oneof![Just("srv".to_owned()), interesting_string()],
    ) {
        let map = params.as_object().cloned().unwrap_or_default();
        let node = members_of(node_of(&params, seed));
        for fields in field_lists() {
            assert_keys_agree(&server, &map, &node, &fields);
        }
        prop_assert_eq!(approval_key_of(&server, &map), approval_key(&server, &map));
        prop_assert_eq!(approval_key_of(&server, &map), approval_key_of(&server, &node));
    }

    #[test]
    fn node_and_value_agree_on_arbitrary_params(
        entries in proptest::collection::vec(
            (
                prop_oneof![
                    3 => prop::sample::select(crate::table::IDENTITY_FIELDS.to_vec())
                        .prop_map(str::to_owned),
                    1 => key(),
                ],
                json_value(),
            ),
            0..8,
        ),
        seed in any::<u64>(),
    ) {
        // Every field holding anything at all: the normal form's
        // fallbacks (a `messages` that is not a list, and so on).
        let params = object_of(entries);
        let map = params.as_object().cloned().unwrap_or_default();
        let node = members_of(node_of(&params, seed));
        for fields in field_lists() {
            assert_keys_agree("srv", &map, &node, &fields);
        }
        prop_assert_eq!(approval_key_of("srv", &map), approval_key_of("srv", &node));
    }
}

#[test]
fn a_message_in_document_order_is_written_sorted() {
    let node = Node::Array(vec![Node::Object(Members(vec![
        (Cow::Borrowed("role"), Node::String(Cow::Borrowed("user"))),
        (
            Cow::Borrowed("content"),
            Node::Object(Members(vec![
                (Cow::Borrowed("type"), Node::String(Cow::Borrowed("text"))),
                (Cow::Borrowed("text"), Node::String(Cow::Borrowed("hi"))),
            ])),
        ),
    ]))]);
    assert_eq!(
        canonical_of(&node),
        br#"[{"content":{"text":"hi","type":"text"},"role":"user"}]"#
    );
    for recursion in [0, 1, RECURSION] {
        assert_eq!(canonical_with(&node, true, recursion), canonical_of(&node));
    }
}

#[test]
fn keys_out_of_order_with_keys_not_ascii_take_the_entries() {
    // An ASCII key out of order before a key that is not ASCII, and after
    // one: the in-place sort must give way to the entries either way.
    let docs = [
        json!({"b": 1, "a": 2, "é": 3, "\u{e000}": 4, "\u{1f600}": 5}),
        json!({"é": 1, "b": 2, "a": 3}),
        json!({"z": 1, "e\u{301}": 2, "a": 3}),
        json!({"a": {"y": 1, "x": 2}, "\u{1f600}": {"d": [{"c": 1, "b": 2}]}}),
    ];
    for doc in &docs {
        for seed in 0..16 {
            let node = node_of(doc, seed);
            assert_eq!(
                canonical_of(&node),
                canonical_bytes(doc),
                "{doc} seed {seed}"
            );
        }
    }
}

#[test]
fn keys_not_ascii_before_ascii_keys_out_of_order_take_the_entries() {
    // In order as far as a key that is not ASCII, then ASCII keys out of
    // order: sorting the members by bytes would write the NFD key as it is
    // and put U+E000 before U+1F600 (UTF-16 puts the surrogates first).
    let orders: [&[&str]; 4] = [
        &["\u{1f600}", "\u{e000}", "b", "a"],
        &["e\u{301}", "b", "a"],
        &["a", "\u{1f600}", "\u{e000}", "c", "b"],
        &["\u{e9}", "z", "y"],
    ];
    for keys in orders {
        let node = Node::Object(Members(
            keys.iter()
                .enumerate()
                .map(|(i, key)| (Cow::Borrowed(*key), Node::Number(Number::from(i))))
                .collect(),
        ));
        let value = node.to_value();
        assert_eq!(canonical_of(&node), canonical_bytes(&value), "{keys:?}");
        for recursion in [0, RECURSION] {
            assert_eq!(
                canonical_with(&node, true, recursion),
                canonical_bytes(&value)
            );
        }
    }
}

#[test]
fn frozen_vectors_hold_for_a_node() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/cases/identity/vectors.json"
    );
    let text = std::fs::read_to_string(path).expect("vectors readable");
    let doc: Value = serde_json::from_str(&text).expect("vectors are JSON");
    let vectors = doc["vectors"].as_array().expect("vectors");
    assert!(vectors.len() >= 20);
    for vector in vectors {
        let name = vector["name"].as_str().expect("name");
        let server = vector["server"].as_str().expect("server");
        let frozen = vector["identity"].as_str().expect("a frozen identity");
        let fields: Vec<&str> = vector["fields"]
            .as_array()
            .expect("fields")
            .iter()
            .map(|field| field.as_str().expect("a field name"))
            .collect();
        let map = vector["params"].as_object().expect("params");
        assert_eq!(
            request_identity(server, map, &fields).as_str(),
            frozen,
            "{name}"
        );
        for seed in 0..8 {
            let node = members_of(node_of(&vector["params"], seed));
            let identity = identity_of(server, looked_up(&node, &fields));
            assert_eq!(identity.as_str(), frozen, "{name} seed {seed}");
            assert_keys_agree(server, map, &node, &fields);
            assert_eq!(
                approval_key_of(server, &node),
                approval_key(server, map),
                "{name}"
            );
        }
    }
}
