//! The exact bytes of frames: what a server branches on must not drift.

use mcpolicy_runtime::calendar::timestamp;
use mcpolicy_runtime::frame::{
    self, Annotations, ContextTrim, DenialData, MaxTokensTrim, ModelTrim, Timing, annotate_result,
};
use mcpolicy_runtime::table::ContextScope;
use serde_json::json;

#[test]
fn the_seeds_budget_frame_byte_for_byte() {
    let data = DenialData {
        reason: "policy.budget_exhausted".into(),
        server: "release-notes".into(),
        retryable: false,
        timing: Some(Timing::ResetsAt(timestamp(2026, 3, 11, 0, 0, 0))),
    };
    let text = frame::error_response(
        Some(&json!(47)),
        -32003,
        "Sampling denied: 24h budget for server 'release-notes' exhausted",
        Some(&data.to_json()),
    );
    assert_eq!(
        text,
        r#"{"jsonrpc":"2.0","id":47,"error":{"code":-32003,"message":"Sampling denied: 24h budget for server 'release-notes' exhausted","data":{"reason":"policy.budget_exhausted","server":"release-notes","retryable":false,"resetsAt":"2026-03-11T00:00:00Z"}}}"#
    );
}

#[test]
fn retry_after_and_plain_data() {
    let rate = DenialData {
        reason: "policy.rate_limit".into(),
        server: "ünï\u{1F600}".into(),
        retryable: true,
        timing: Some(Timing::RetryAfter(12)),
    };
    assert_eq!(
        rate.to_json(),
        "{\"reason\":\"policy.rate_limit\",\"server\":\"ünï\u{1F600}\",\"retryable\":true,\"retryAfter\":12}"
    );
    let plain = DenialData {
        reason: "user.denied".into(),
        server: "a\nb".into(),
        retryable: false,
        timing: None,
    };
    assert_eq!(
        plain.to_json(),
        r#"{"reason":"user.denied","server":"a\nb","retryable":false}"#
    );
}

#[test]
fn ids_and_error_frames() {
    assert_eq!(
        frame::request_error_response(None, -32700, "invalid JSON"),
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"invalid JSON"}}"#
    );
    assert_eq!(
        frame::request_error_response(Some(&json!("x\"y")), -32602, "bad"),
        r#"{"jsonrpc":"2.0","id":"x\"y","error":{"code":-32602,"message":"bad"}}"#
    );
    // A boolean or object id is not a JSON-RPC id: null.
    assert!(frame::request_error_response(Some(&json!(true)), -32600, "m").contains("\"id\":null"));
    let internal: serde_json::Value = serde_json::from_str(&frame::internal_error_response(
        Some(&json!(3)),
        "s",
        "disk full",
    ))
    .expect("json");
    assert_eq!(internal["error"]["code"], -32603);
    assert_eq!(
        internal["error"]["data"],
        json!({"reason": "runtime.store_unavailable", "server": "s", "retryable": true})
    );
    assert_eq!(
        frame::local_error_response(
            Some(&json!(9)),
            -1,
            "no",
            Some(r#"{"reason":"user.denied"}"#)
        ),
        r#"{"jsonrpc":"2.0","id":9,"error":{"code":-1,"message":"no","data":{"reason":"user.denied"}}}"#
    );
}

#[test]
fn annotation_shapes() {
    let annotations = Annotations {
        context: Some(ContextTrim {
            requested: ContextScope::AllServers,
            applied: ContextScope::None,
        }),
        max_tokens: Some(MaxTokensTrim {
            requested: 8000,
            applied: 4096,
        }),
        model: Some(ModelTrim {
            requested: vec![Some("gpt-5".into()), None],
            applied: vec![],
            allowed: vec!["claude-*".into()],
        }),
    };
    let mut result = json!({"role": "assistant", "content": {"type": "text", "text": "t"}, "model": "claude-x", "stopReason": "endTurn"});
    assert!(annotate_result(&mut result, &annotations));
    assert_eq!(
        result["_meta"],
        json!({
            "context": {"requested": "allServers", "applied": "none", "reason": "policy.max_scope"},
            "maxTokens": {"requested": 8000, "applied": 4096, "reason": "policy.max_tokens"},
            "model": {"requested": ["gpt-5", null], "applied": [], "allowed": ["claude-*"], "reason": "policy.model"},
        })
    );
    // Nothing to add: the result is untouched (no empty `_meta`).
    let mut plain = json!({"model": "m"});
    assert!(annotate_result(&mut plain, &Annotations::default()));
    assert_eq!(plain, json!({"model": "m"}));
}

#[test]
fn input_request_listing() {
    let result = json!({"resultType": "input_required", "inputRequests": {
        "b": {"method": "sampling/createMessage", "params": {}},
        "a": {"method": "elicitation/create", "params": {}},
        "c": {"params": {}},
    }});
    let entries = frame::input_requests(&result);
    let summary: Vec<(&str, bool)> = entries
        .iter()
        .map(|e| (e.key.as_str(), e.is_sampling()))
        .collect();
    assert_eq!(summary, [("a", false), ("b", true), ("c", false)]);
    // The inputRequests value on its own works too.
    assert_eq!(frame::input_requests(&result["inputRequests"]).len(), 3);
    assert!(frame::input_requests(&json!("x")).is_empty());
}
