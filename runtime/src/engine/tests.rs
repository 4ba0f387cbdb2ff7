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

mod applied_to {
    use super::*;
    use proptest::prelude::*;

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<u32>().prop_map(Value::from),
            "[a-z]{0,3}".prop_map(Value::from),
        ]
    }

    fn field() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(
                    prop_oneof![Just("hints".to_owned()), "[a-z]{1,3}"],
                    inner,
                    0..4
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn params() -> impl Strategy<Value = Map<String, Value>> {
        proptest::collection::btree_map(
            prop_oneof![
                Just("includeContext".to_owned()),
                Just("maxTokens".to_owned()),
                Just("modelPreferences".to_owned()),
                Just("messages".to_owned()),
                "[a-z]{1,4}",
            ],
            field(),
            0..6,
        )
        .prop_map(|m| m.into_iter().collect())
    }

    fn lowered() -> impl Strategy<Value = Lowered> {
        (
            proptest::option::of(prop_oneof![
                Just(ContextScope::None),
                Just(ContextScope::ThisServer)
            ]),
            proptest::option::of(any::<u64>()),
            proptest::option::of(proptest::collection::vec(leaf(), 0..3)),
        )
            .prop_map(|(include_context, max_tokens, model_hints)| Lowered {
                include_context,
                max_tokens,
                model_hints,
            })
    }

    proptest! {
        /// The copy that skips what a trim replaces is the copy with the
        /// trim applied, whatever the params hold (`modelPreferences` of
        /// any type, with or without hints).
        #[test]
        fn is_apply_on_a_clone(params in params(), lowered in lowered()) {
            let mut expected = params.clone();
            lowered.apply(&mut expected);
            prop_assert_eq!(lowered.applied_to(&params), expected);
        }
    }
}
