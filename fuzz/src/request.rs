//! The strict request parser and the request identity: hostile bytes as a
//! `sampling/createMessage` request, as `mcpc identity`, `mcpc eval` and the
//! proxy read them.

use std::sync::{Arc, OnceLock};

use mcpolicy_compiler::check::{DEFAULT_IDENTITY, IDENTITY_FIELDS};
use mcpolicy_runtime::clock::FixedClock;
use mcpolicy_runtime::engine::{Answer, ClientContext, Decision};
use mcpolicy_runtime::identity::{self, RequestIdentity};
use mcpolicy_runtime::jsonrpc;
use mcpolicy_runtime::request::{self, RequestError};
use mcpolicy_runtime::store::MemoryStore;
use mcpolicy_runtime::{Engine, Policy};
use serde_json::{Map, Value};

/// Identity field lists a checked policy can name (the checker takes only
/// `IDENTITY_FIELDS`, all ASCII): the default, all of them, none, and one
/// that names a field twice.
fn field_sets() -> Vec<Vec<String>> {
    let own = |fields: &[&str]| fields.iter().map(|f| (*f).to_owned()).collect();
    vec![
        own(DEFAULT_IDENTITY),
        own(IDENTITY_FIELDS),
        Vec::new(),
        own(&["messages", "messages", "metadata"]),
    ]
}

/// A valid JSON-RPC error response answering `id` (or `null`).
pub fn assert_error_frame(frame: &[u8], id: Option<&Value>, codes: &[i32]) {
    let frame = String::from_utf8_lossy(frame);
    let value: Value = match serde_json::from_str(&frame) {
        Ok(value) => value,
        Err(e) => panic!("the error frame is not JSON ({e}): {frame}"),
    };
    let Some(object) = value.as_object() else {
        panic!("the error frame is not an object: {frame}");
    };
    assert_eq!(object.get("jsonrpc"), Some(&Value::from("2.0")), "{frame}");
    assert!(!object.contains_key("result"), "{frame}");
    let answered = object.get("id");
    match id {
        Some(id) => assert_eq!(answered, Some(id), "the frame lost the id: {frame}"),
        None => assert!(
            matches!(
                answered,
                Some(Value::Null | Value::String(_) | Value::Number(_))
            ),
            "not a JSON-RPC id: {frame}"
        ),
    }
    let code = value.pointer("/error/code").and_then(Value::as_i64);
    assert!(
        code.is_some_and(|c| codes.iter().any(|&ok| i64::from(ok) == c)),
        "error code {code:?} not among {codes:?}: {frame}"
    );
    assert!(
        value
            .pointer("/error/message")
            .is_some_and(Value::is_string),
        "no message: {frame}"
    );
}

fn identities(params: &Map<String, Value>, sets: &[Vec<String>]) -> Vec<RequestIdentity> {
    sets.iter()
        .map(|fields| identity::request_identity("fuzz", params, fields))
        .collect()
}

/// Parses and validates bytes the way every consumer does.
fn accept(bytes: &[u8]) -> Result<request::SamplingRequest, RequestError> {
    request::parse_strict(bytes).and_then(request::validate_sampling)
}

/// `request`: no panic; a refusal is a valid JSON-RPC error frame with a
/// JSON-RPC code and the id when it was readable; an accepted request has a
/// stable identity: the same after re-serialising the request (serde_json
/// sorts the keys) and after reading its canonical form back, and the
/// canonical form is a fixed point. The engine decides the same bytes
/// without a panic.
pub fn run(data: &[u8]) {
    let parsed = request::parse_strict(data);
    // The fast path reads what serde_json reads, and refuses the rest with
    // its error (`runtime/tests/strict_reader.rs`).
    let limits = request::Limits::default();
    assert_eq!(
        parsed,
        request::parse_strict_serde(data, &limits),
        "the strict reader's two paths differ"
    );
    // The borrowed tree a decision from bytes is made on accepts the same
    // documents, read as the same values (`runtime/tests/tree_path.rs`).
    assert_eq!(
        request::parse_strict_tree(data, &limits).as_ref(),
        parsed.as_ref().ok(),
        "the tree reads other than the strict reader"
    );
    let id = parsed.as_ref().ok().and_then(request::envelope_id).cloned();
    let validated = parsed.clone().and_then(request::validate_sampling);
    let sets = field_sets();
    match &validated {
        Err(error) => {
            let code = error.code();
            let frame = mcpolicy_runtime::frame::request_error_response(
                id.as_ref(),
                code,
                &error.to_string(),
            );
            assert_error_frame(
                &frame,
                id.as_ref(),
                &[
                    jsonrpc::PARSE_ERROR,
                    jsonrpc::INVALID_REQUEST,
                    jsonrpc::INVALID_PARAMS,
                ],
            );
        }
        Ok(sampling) => {
            if let (Some(id), Some(got)) = (&id, &sampling.id) {
                assert_eq!(id, got);
            }
            let first = identities(sampling.params(), &sets);
            for identity in &first {
                let text = identity.as_str();
                let hex = text.strip_prefix("fuzz:").unwrap_or_default();
                assert!(
                    hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
                    "malformed identity {text}"
                );
            }
            // Re-serialised by serde_json: other key order, other escapes.
            let value = parsed.as_ref().ok().cloned().unwrap_or(Value::Null);
            let text = value.to_string();
            match accept(text.as_bytes()) {
                Ok(again) => assert!(
                    identities(again.params(), &sets) == first,
                    "the identity changed when the request was re-serialised: {text}"
                ),
                Err(e) => panic!("the re-serialised request is refused ({e}): {text}"),
            }
            // The canonical form reads back (as JSON: it need not be a
            // valid request, RFC 8785 writes 2^64-1 as 18446744073709552000),
            // with the same identity, and is its own canonical form.
            let params = Value::Object(sampling.params().clone());
            let canonical = identity::canonical_bytes(&params);
            let shown = String::from_utf8_lossy(&canonical).into_owned();
            match request::parse_strict(&canonical) {
                Ok(Value::Object(again)) => {
                    assert!(
                        identities(&again, &sets) == first,
                        "the identity changed through the canonical form: {shown}"
                    );
                    let twice = identity::canonical_bytes(&Value::Object(again));
                    assert!(
                        twice == canonical,
                        "canonical form not a fixed point: {shown}"
                    );
                }
                Ok(_) => panic!("the canonical form of an object is not an object: {shown}"),
                Err(e) => panic!("the canonical form is refused ({e}): {shown}"),
            }
            assert_eq!(
                identity::canonical_len(&params),
                canonical.len() as u64,
                "canonical_len disagrees with canonical_bytes"
            );
        }
    }
    decide(data, &id);
}

/// What a decision says: the key it is stored under, or a denial's reply.
fn said(decision: &Decision) -> Vec<u8> {
    match decision {
        Decision::Allow(grant) | Decision::Trim(grant) => grant.identity().into(),
        Decision::NeedsConsent(pending) => pending.identity().into(),
        Decision::Deny(denial) => denial.reply(None),
    }
}

/// The engine over the same bytes: an invalid request is answered with
/// the same code the parser gives; a decided one has a well-formed answer,
/// and is decided (on the borrowed tree) as the request the parser gives
/// is decided on its `Value`: the same request, key and cause.
fn decide(data: &[u8], id: &Option<Value>) {
    let engine = || {
        Engine::new(
            policy().clone(),
            Arc::new(MemoryStore::new()),
            Arc::new(FixedClock(1_773_144_000_000)),
        )
    };
    let (engine, on_value) = (engine(), engine());
    for server in ["fuzz", "off"] {
        match engine.decide(server, data, &ClientContext::default()) {
            Answer::Invalid(rejection) => {
                assert!(
                    accept(data).is_err(),
                    "the engine refused what the parser accepts"
                );
                assert_error_frame(&rejection.reply(), id.as_ref(), &[rejection.code()]);
            }
            Answer::Failed { error, .. } => panic!("a memory store failed: {error}"),
            Answer::Decided { decision, request } => {
                let Ok(accepted) = accept(data) else {
                    panic!("the engine decided what the parser refuses");
                };
                assert_eq!(request, accepted, "the tree's request differs");
                match on_value.decide_request(server, &accepted, &ClientContext::default()) {
                    Ok(again) => {
                        assert_eq!(said(&decision), said(&again), "the decisions differ");
                        assert_eq!(decision.cause(), again.cause(), "the causes differ");
                    }
                    Err(error) => panic!("a memory store failed: {error}"),
                }
                if let Decision::Deny(denial) = &decision {
                    assert!(!denial.reason().is_empty());
                    let frame = denial.reply(request.id.as_ref());
                    assert_error_frame(&frame, request.id.as_ref(), &[denial.code()]);
                }
            }
        }
    }
}

/// A policy with a denying, a trimming and a budgeted server (built once).
fn policy() -> &'static Policy {
    static POLICY: OnceLock<Policy> = OnceLock::new();
    POLICY.get_or_init(build_policy)
}

fn build_policy() -> Policy {
    // A policy file of its own: policy text is not Rust.
    let text = include_str!("request.mcpolicy");
    let parsed = mcpolicy_compiler::parse::parse(text);
    let model = mcpolicy_compiler::check::check(&parsed.file).model;
    match Policy::verify(mcpolicy_compiler::lower::lower(&model)) {
        Ok(policy) => policy,
        Err(e) => panic!("the fuzz policy does not verify: {e}"),
    }
}
