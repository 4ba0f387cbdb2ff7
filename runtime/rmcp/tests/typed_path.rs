//! The typed path decides as the bytes path does (`docs/spec/identity.md`:
//! the identity is canonical over the params, never over their bytes).
//!
//! The bytes path is `Engine::decide` on the frame a server sends; the typed
//! path is what `PolicyClient::create_message` runs: rmcp reads the same
//! frame's params into `CreateMessageRequestParams`, and `typed_request`
//! makes them the runtime's request. For generated params, written on the
//! wire as an rmcp server writes them and as a server in another language
//! writes short decimals, both give the same identity, the same decision,
//! the same trims and the same params to run. The frozen identity vectors
//! (`tests/cases/identity/vectors.json`) that rmcp's types hold as written
//! give their frozen identity through the typed path.
#![expect(deprecated, reason = "sampling/createMessage is what is under test")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::path::Path;
use std::sync::Arc;

use mcpolicy_rmcp::typed_request;
use mcpolicy_runtime::clock::{self, ManualClock};
use mcpolicy_runtime::engine::{Answer, ClientContext, Decision};
use mcpolicy_runtime::identity::{canonical_bytes, request_identity};
use mcpolicy_runtime::store::MemoryStore;
use mcpolicy_runtime::{Engine, Policy};
use proptest::prelude::*;
use rmcp::model::CreateMessageRequestParams;
use serde_json::{Map, Value, json};

fn repository() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn engine() -> Engine {
    let table = std::fs::read(repository().join("tests/cases/adapters/policy.table.json")).unwrap();
    Engine::new(
        Policy::from_json(&table).unwrap(),
        Arc::new(MemoryStore::new()),
        Arc::new(ManualClock::new(clock::timestamp(2026, 3, 10, 12, 0, 0))),
    )
}

/// Params as every JSON reader compares them: their canonical form (rmcp
/// holds a priority as an `f32`, so a server's `0` comes back `0.0`, the
/// same number).
fn canonical(params: Map<String, Value>) -> String {
    String::from_utf8(canonical_bytes(&Value::Object(params))).unwrap()
}

/// What a decision says, comparable across two engines.
fn summary(decision: &Decision, original: &Map<String, Value>) -> Value {
    match decision {
        Decision::Allow(grant) | Decision::Trim(grant) => json!({
            "kind": if grant.is_trim() { "trim" } else { "allow" },
            "identity": grant.identity(),
            "meta": grant.annotations().to_meta(),
            "params": canonical(grant.params(original)),
            "deadline": grant.deadline_ms(),
        }),
        Decision::Deny(denial) => json!({
            "kind": "deny",
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

/// Both paths over one frame's params, on two fresh engines: equal.
fn both_paths_agree(server: &str, params_text: &str) -> Result<(), TestCaseError> {
    let ctx = ClientContext::with_sampling_context(true);
    let frame = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{params_text}}}"#
    );
    let bytes_engine = engine();
    let Answer::Decided { request, decision } = bytes_engine.decide(server, frame.as_bytes(), &ctx)
    else {
        return Err(TestCaseError::fail(format!("not decided: {frame}")));
    };
    let bytes_side = summary(&decision, request.params());

    // What rmcp's client reads from the same frame, then the typed path.
    let typed: CreateMessageRequestParams = serde_json::from_str(params_text).unwrap();
    let typed_engine = engine();
    let typed_request = typed_request(&typed, typed_engine.policy().table().protocol).unwrap();
    prop_assert_eq!(
        typed_engine.identity(server, typed_request.params()),
        bytes_engine.identity(server, request.params())
    );
    let decision = typed_engine
        .decide_request(server, &typed_request, &ctx)
        .unwrap();
    prop_assert_eq!(bytes_side, summary(&decision, typed_request.params()));
    Ok(())
}

fn text() -> impl Strategy<Value = String> {
    // ASCII, accents composed and decomposed (NFC), CJK, emoji, controls.
    proptest::string::string_regex(
        "[a-zA-Z0-9 .,]{0,12}(é|e\u{301}|Å|A\u{30a}|漢字|🙂|\t|\u{0}|\\\\|\"){0,3}",
    )
    .unwrap()
}

fn message() -> impl Strategy<Value = Value> {
    (prop_oneof![Just("user"), Just("assistant")], text())
        .prop_map(|(role, text)| json!({"role": role, "content": {"type": "text", "text": text}}))
}

/// A priority or temperature as a server writes it: an `f32`'s shortest
/// decimal (rmcp, ryu), or a short decimal (any other language).
fn unit_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0.0f32..=1.0f32).prop_map(|f| serde_json::from_str(&f.to_string()).unwrap()),
        (0u32..=1000)
            .prop_map(|k| serde_json::from_str(&format!("{}", f64::from(k) / 1000.0)).unwrap()),
    ]
}

prop_compose! {
    fn params()(
        messages in proptest::collection::vec(message(), 1..4),
        system in proptest::option::of(text()),
        context in proptest::option::of(prop_oneof![Just("none"), Just("thisServer"), Just("allServers")]),
        max_tokens in 1u32..10_000,
        temperature in proptest::option::of(unit_number()),
        hints in proptest::option::of(proptest::collection::vec("[a-z0-9-]{1,10}", 0..3)),
        priorities in proptest::collection::vec(proptest::option::of(unit_number()), 3),
    ) -> Value {
        let mut params = json!({"messages": messages, "maxTokens": max_tokens});
        if let Some(system) = system { params["systemPrompt"] = json!(system); }
        if let Some(context) = context { params["includeContext"] = json!(context); }
        if let Some(temperature) = temperature { params["temperature"] = temperature; }
        let mut preferences = Map::new();
        if let Some(hints) = hints {
            preferences.insert("hints".into(), hints.iter().map(|h| json!({"name": h})).collect());
        }
        for (name, value) in ["costPriority", "speedPriority", "intelligencePriority"].iter().zip(priorities) {
            if let Some(value) = value { preferences.insert((*name).into(), value); }
        }
        if !preferences.is_empty() { params["modelPreferences"] = Value::Object(preferences); }
        params
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// As a server in another language writes them: the generated JSON text.
    #[test]
    fn typed_and_bytes_paths_decide_alike(
        params in params(),
        server in prop_oneof![Just("open"), Just("summarizer"), Just("closed"), Just("asked"), Just("tokens")],
    ) {
        both_paths_agree(server, &serde_json::to_string(&params).unwrap())?;
    }

    /// As an rmcp server writes them: its typed params serialised.
    #[test]
    fn typed_and_bytes_paths_decide_alike_for_an_rmcp_server(
        params in params(),
        server in prop_oneof![Just("open"), Just("summarizer"), Just("asked")],
    ) {
        let typed: CreateMessageRequestParams = serde_json::from_value(params).unwrap();
        both_paths_agree(server, &serde_json::to_string(&typed).unwrap())?;
    }
}

/// The frozen identity vectors through rmcp's types and the typed path:
/// every vector whose params rmcp holds as written (read, then written back,
/// they are the same JSON) gives its frozen identity.
#[test]
fn frozen_identity_vectors_through_the_typed_path() {
    let vectors = std::fs::read(repository().join("tests/cases/identity/vectors.json")).unwrap();
    let vectors: Value = serde_json::from_slice(&vectors).unwrap();
    let mut checked = 0;
    for vector in vectors["vectors"].as_array().unwrap() {
        let params = &vector["params"];
        let Ok(typed) = serde_json::from_value::<CreateMessageRequestParams>(params.clone()) else {
            continue;
        };
        let request = typed_request(&typed, Default::default()).unwrap();
        if Value::Object(request.params().clone()) != *params {
            continue;
        }
        let fields: Vec<&str> = vector["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        let server = vector["server"].as_str().unwrap();
        assert_eq!(
            request_identity(server, request.params(), &fields).as_str(),
            vector["identity"],
            "{}",
            vector["name"]
        );
        checked += 1;
    }
    assert!(
        checked >= 10,
        "only {checked} vectors are held as written by rmcp"
    );
}
