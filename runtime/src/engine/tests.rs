//! Unit tests of the engine's private helpers.

use super::*;

#[test]
fn canonical_bound_is_an_upper_bound() {
    let values = [
        serde_json::json!({"a\u{1}": ["\u{1f}\"\\", 1.5e300, -0.0, null, true, {"é": "e\u{301}"}]}),
        serde_json::json!("\u{0958}\u{1D160}\u{FB2C}"),
        serde_json::json!([12345678901234567890u64, -9007199254740993i64, 1e-7]),
    ];
    for value in values {
        assert!(
            canonical_bound(&value) >= identity::canonical_len(&value),
            "{value}"
        );
    }
}

#[test]
fn timing_is_read_back_from_data() {
    let data = r#"{"reason":"r","server":",\"retryAfter\":9","retryable":true,"retryAfter":12}"#;
    let timing = |data: &str| DenialData::from_json(data).and_then(|d| d.timing);
    assert_eq!(timing(data), Some(Timing::RetryAfter(12)));
    let data = r#"{"reason":"r","server":"s","retryable":false,"resetsAt":"2026-03-11T00:00:00Z"}"#;
    assert_eq!(
        timing(data),
        Some(Timing::ResetsAt(calendar::timestamp(2026, 3, 11, 0, 0, 0)))
    );
    assert_eq!(
        timing(r#"{"reason":"r","server":"s","retryable":true}"#),
        None
    );
    assert_eq!(DenialData::from_json(r#"{"reason":"r"}"#), None);
}

#[test]
fn expiry_never_outlives_the_condition() {
    assert_eq!(expiry(Ttl::None, 0, Some(5)), Expiry::NotStored);
    assert_eq!(expiry(Ttl::Forever, 0, Some(5)), Expiry::UntilBlockChanges);
    assert_eq!(expiry(Ttl::UntilReset, 0, Some(5)), Expiry::At(5));
    assert_eq!(expiry(Ttl::UntilReset, 0, None), Expiry::UntilBlockChanges);
    assert_eq!(expiry(Ttl::AfterMs(10), 0, Some(5)), Expiry::At(5));
    assert_eq!(expiry(Ttl::AfterMs(10), 0, None), Expiry::At(10));
    assert_eq!(
        expiry(Ttl::AfterMs(u64::MAX), 1, None),
        Expiry::At(i64::MAX)
    );
}

#[test]
fn steps_are_numbered_as_the_specification() {
    let steps = [
        Step::Validation,
        Step::Identity,
        Step::Replay,
        Step::Switches,
        Step::InputLimits,
        Step::Trims,
        Step::Rate,
        Step::Budgets,
        Step::Consent,
        Step::Allow,
    ];
    let numbers: Vec<u8> = steps.iter().map(|s| s.number()).collect();
    assert_eq!(numbers, (1..=10).collect::<Vec<u8>>());
}
