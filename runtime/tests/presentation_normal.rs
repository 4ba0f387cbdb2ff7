//! The presentation-normal form (`docs/spec/identity.md`, "The refusal
//! key") is computed borrowing every part of a request that is already
//! normal, so that a request as clients write it is hashed without a copy.
//! This holds it to the owned normaliser it replaced, kept here as the
//! reference: on arbitrary JSON in every identity field (content blocks of
//! every type, nested tool results, resources, hints, invisible characters
//! and outer white space), both give the same normal form, and the refusal
//! key is the identity of that form.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use mcpolicy_runtime::identity::{
    approval_key, canonical_bytes, is_default_ignorable, presentation_normal, presentation_text,
    refusal_key, request_identity,
};
use proptest::prelude::*;
use serde_json::{Map, Value};

/// The owned normaliser, as first written: every field rebuilt.
mod reference {
    use super::*;

    pub(super) fn presentation_normal<F: AsRef<str>>(
        params: &Map<String, Value>,
        fields: &[F],
    ) -> Map<String, Value> {
        let mut out = Map::new();
        for field in fields {
            let field = field.as_ref();
            let Some(value) = params.get(field) else {
                continue;
            };
            let normal = match field {
                "systemPrompt" => Some(normal_strings(value)),
                "messages" => Some(normal_messages(value)),
                "includeContext" => match value {
                    // `none` is what an absent `includeContext` means.
                    Value::String(scope) if scope == "none" => None,
                    other => Some(other.clone()),
                },
                "modelPreferences" => normal_preferences(value),
                _ => Some(value.clone()),
            };
            if let Some(normal) = normal {
                out.insert(field.to_owned(), normal);
            }
        }
        out
    }
    fn normal_strings(value: &Value) -> Value {
        match value {
            Value::String(text) => Value::String(presentation_text(text).into_owned()),
            Value::Array(items) => Value::Array(items.iter().map(normal_strings).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(key, item)| (key.clone(), normal_strings(item)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    fn normal_messages(value: &Value) -> Value {
        let Value::Array(messages) = value else {
            return normal_strings(value);
        };
        Value::Array(
            messages
                .iter()
                .map(|message| match message {
                    Value::Object(map) => {
                        let mut out = Map::new();
                        if let Some(role) = map.get("role") {
                            out.insert("role".to_owned(), normal_strings(role));
                        }
                        if let Some(content) = map.get("content") {
                            out.insert("content".to_owned(), normal_content(content));
                        }
                        Value::Object(out)
                    }
                    other => normal_strings(other),
                })
                .collect(),
        )
    }
    fn normal_content(value: &Value) -> Value {
        match value {
            Value::Array(blocks) if blocks.len() == 1 => normal_block(&blocks[0]),
            Value::Array(blocks) => Value::Array(blocks.iter().map(normal_block).collect()),
            other => normal_block(other),
        }
    }
    fn normal_block(value: &Value) -> Value {
        let Value::Object(block) = value else {
            return normal_strings(value);
        };
        let kept: &[&str] = match block.get("type").and_then(Value::as_str) {
            Some("text") => &["type", "text"],
            Some("image" | "audio") => &["type", "data", "mimeType"],
            Some("tool_use") => &["type", "name", "input"],
            Some("tool_result") => &["type", "content", "structuredContent", "isError"],
            Some("resource") => &["type", "resource"],
            Some("resource_link") => &["type", "uri", "name", "title", "description", "mimeType"],
            _ => &[],
        };
        let mut out = Map::new();
        for (key, item) in block {
            let keep = if kept.is_empty() {
                !matches!(key.as_str(), "_meta" | "annotations")
            } else {
                kept.contains(&key.as_str())
            };
            if !keep {
                continue;
            }
            let normal = match key.as_str() {
                "content" if kept.contains(&"isError") => match item {
                    Value::Array(blocks) => Value::Array(blocks.iter().map(normal_block).collect()),
                    other => normal_block(other),
                },
                "isError" if *item == Value::Bool(false) => continue,
                "resource" => match item {
                    Value::Object(resource) => Value::Object(
                        resource
                            .iter()
                            .filter(|(k, _)| {
                                matches!(k.as_str(), "uri" | "mimeType" | "text" | "blob")
                            })
                            .map(|(k, v)| (k.clone(), normal_strings(v)))
                            .collect(),
                    ),
                    other => normal_strings(other),
                },
                _ => normal_strings(item),
            };
            out.insert(key.clone(), normal);
        }
        Value::Object(out)
    }
    fn normal_preferences(value: &Value) -> Option<Value> {
        let Value::Object(preferences) = value else {
            return Some(normal_strings(value));
        };
        let mut out = Map::new();
        match preferences.get("hints") {
            Some(Value::Array(hints)) if hints.is_empty() => {}
            Some(Value::Array(hints)) => {
                let hints = hints
                    .iter()
                    .map(|hint| match hint {
                        Value::Object(hint) => Value::Object(
                            hint.get("name")
                                .map(|name| ("name".to_owned(), normal_strings(name)))
                                .into_iter()
                                .collect(),
                        ),
                        other => normal_strings(other),
                    })
                    .collect();
                out.insert("hints".to_owned(), Value::Array(hints));
            }
            Some(other) => {
                out.insert("hints".to_owned(), normal_strings(other));
            }
            None => {}
        }
        (!out.is_empty()).then_some(Value::Object(out))
    }
}

const FIELDS: [&str; 5] = [
    "systemPrompt",
    "messages",
    "includeContext",
    "modelPreferences",
    "maxTokens",
];

/// Text with what normalisation removes or keeps: outer and inner white
/// space, default-ignorable characters, combining marks.
fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "a", "b", " ", "\t", "\u{200B}", "\u{FEFF}", "\u{00AD}", "é", "e\u{301}", "none",
        ]),
        0..5,
    )
    .prop_map(|parts| parts.concat())
}

/// The member names normalisation reads, and some it does not know.
fn key() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "type",
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
        "role",
        "hints",
        "costPriority",
        "blob",
        "extra",
    ])
    .prop_map(str::to_owned)
}

/// Arbitrary JSON, biased to content blocks: a `type` of every kind.
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        text().prop_map(Value::String),
        prop::sample::select(vec![
            "text",
            "image",
            "audio",
            "tool_use",
            "tool_result",
            "resource",
            "resource_link",
            "user",
            "assistant",
        ])
        .prop_map(Value::from),
        any::<bool>().prop_map(Value::Bool),
        (-3i64..3).prop_map(Value::from),
        Just(Value::Null),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A content block: a `type` and members of every kind, most of them what
/// that type has, so that many blocks are already normal.
fn block() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(vec![
            "text",
            "image",
            "tool_use",
            "tool_result",
            "resource",
            "resource_link",
            "other",
        ]),
        prop::collection::vec(
            (
                key(),
                prop_oneof![3 => text().prop_map(Value::String), 1 => json()],
            ),
            0..4,
        ),
    )
        .prop_map(|(kind, members)| {
            let mut block: Map<String, Value> = members.into_iter().collect();
            block.insert("type".to_owned(), Value::from(kind));
            Value::Object(block)
        })
}

/// A message: `role`, `content` (one block or a list), sometimes more.
fn message() -> impl Strategy<Value = Value> {
    (
        prop_oneof![Just("user".to_owned()), text()],
        prop_oneof![
            block(),
            prop::collection::vec(block(), 0..3).prop_map(Value::Array),
            json(),
        ],
        prop::option::of((key(), json())),
    )
        .prop_map(|(role, content, extra)| {
            let mut message = Map::new();
            message.insert("role".to_owned(), Value::String(role));
            message.insert("content".to_owned(), content);
            if let Some((key, value)) = extra {
                message.insert(key, value);
            }
            Value::Object(message)
        })
}

/// `modelPreferences`: hints with names and more, priorities, or anything.
fn preferences() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::collection::vec(
            prop_oneof![
                text().prop_map(|name| serde_json::json!({"name": name})),
                json()
            ],
            0..3
        )
        .prop_map(|hints| serde_json::json!({"hints": hints})),
        json(),
    ]
}

fn params() -> impl Strategy<Value = Map<String, Value>> {
    (
        prop::option::of(json()),
        prop::collection::vec(prop_oneof![3 => message(), 1 => json()], 0..4),
        prop::option::of(json()),
        prop::option::of(preferences()),
        prop::option::of(json()),
    )
        .prop_map(|(system, messages, scope, preferences, tokens)| {
            let mut params = Map::new();
            let mut put = |name: &str, value: Option<Value>| {
                if let Some(value) = value {
                    params.insert(name.to_owned(), value);
                }
            };
            put("systemPrompt", system);
            put("messages", Some(Value::Array(messages)));
            put("includeContext", scope);
            put("modelPreferences", preferences);
            put("maxTokens", tokens);
            params
        })
}

/// Text of ASCII runs and characters near and on every range of
/// `Default_Ignorable_Code_Point`, whose UTF-8 forms share lead bytes with
/// the ignorables': what the scan for them must not skip or mistake.
fn ignorable_neighbourhood() -> impl Strategy<Value = String> {
    let near = prop::sample::select(vec![
        0x00AC, 0x00AD, 0x00AE, 0x034E, 0x034F, 0x0350, 0x061B, 0x061C, 0x061D, 0x115E, 0x115F,
        0x1160, 0x1161, 0x17B3, 0x17B4, 0x17B5, 0x17B6, 0x180A, 0x180B, 0x180F, 0x1810, 0x200A,
        0x200B, 0x200F, 0x2010, 0x2014, 0x2029, 0x202A, 0x202E, 0x202F, 0x205F, 0x2060, 0x206F,
        0x2070, 0x3163, 0x3164, 0x3165, 0xFDFF, 0xFE00, 0xFE0F, 0xFE10, 0xFEFE, 0xFEFF, 0xFF00,
        0xFF9F, 0xFFA0, 0xFFA1, 0xFFEF, 0xFFF0, 0xFFF8, 0xFFF9, 0x1BC9F, 0x1BCA0, 0x1BCA3, 0x1BCA4,
        0x1D172, 0x1D173, 0x1D17A, 0x1D17B, 0xDFFFF, 0xE0000, 0xE0FFF, 0xE1000, 0xE9,
    ])
    .prop_map(|c| char::from_u32(c).map(String::from).unwrap_or_default());
    let part = prop_oneof![near, "[ a-z]{0,11}", any::<char>().prop_map(String::from)];
    prop::collection::vec(part, 0..12).prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// `presentation_text` is its definition: every character decoded and
    /// the ignorable ones dropped, then the white space at either end.
    #[test]
    fn presentation_text_drops_exactly_the_ignorables(text in ignorable_neighbourhood()) {
        let kept: String = text.chars().filter(|c| !is_default_ignorable(*c)).collect();
        let shown = presentation_text(&text);
        prop_assert_eq!(shown.as_ref(), kept.trim());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn the_borrowing_normal_form_is_the_owned_one(params in params(), listed in prop::collection::vec(prop::sample::select(FIELDS.to_vec()), 0..7)) {
        for fields in [&FIELDS[..], &listed[..]] {
            let normal = reference::presentation_normal(&params, fields);
            prop_assert_eq!(&presentation_normal(&params, fields), &normal);
            prop_assert_eq!(
                refusal_key("srv", &params, fields),
                request_identity("srv", &normal, fields)
            );
        }
    }
}

/// The shapes most requests have are borrowed whole: normalising a request
/// already in normal form changes nothing (and the property above says
/// what is borrowed is what the owned normaliser would have built).
#[test]
fn a_request_in_normal_form_is_its_own_normal_form() {
    let params: Map<String, Value> = serde_json::from_str(
        r#"{"systemPrompt":"You write release notes.","messages":[{"role":"user","content":{"type":"text","text":"Summarise"}}],"includeContext":"thisServer","modelPreferences":{"hints":[{"name":"claude"}]},"maxTokens":100}"#,
    )
    .unwrap();
    let normal = presentation_normal(&params, &FIELDS);
    let as_given: Map<String, Value> = params.clone();
    assert_eq!(normal, as_given);
    assert_eq!(
        refusal_key("srv", &params, &FIELDS),
        request_identity("srv", &params, &FIELDS)
    );
    assert_eq!(presentation_text(" a\u{200B} "), "a");
}

/// The approval key as first written: the covered members copied into an
/// object, its canonical form hashed.
fn reference_approval_key(server_id: &str, forwarded: &Map<String, Value>) -> String {
    use sha2::{Digest, Sha256};
    let covered: Map<String, Value> = forwarded
        .iter()
        .filter(|(key, _)| !matches!(key.as_str(), "_meta" | "task"))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    let mut hasher = Sha256::new();
    hasher.update(b"mcpolicy approval key v1\n");
    hasher.update(canonical_bytes(&Value::Object(covered)));
    let digest = hasher.finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("{server_id}:approval:{hex}")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The approval key hashes the covered members in place, as the copy did.
    #[test]
    fn the_approval_key_hashes_what_the_copy_did(
        mut params in params(),
        meta in prop::option::of(json()),
        task in prop::option::of(json()),
        keys in prop::collection::vec((key(), json()), 0..4),
    ) {
        for (name, value) in [("_meta", meta), ("task", task)] {
            if let Some(value) = value {
                params.insert(name.to_owned(), value);
            }
        }
        params.extend(keys);
        prop_assert_eq!(
            approval_key("srv", &params).into_string(),
            reference_approval_key("srv", &params)
        );
    }
}
