//! The two keys of a request (`docs/spec/identity.md`, "Two keys"): an
//! approval covers exactly what the user was shown, a refusal covers every
//! variant of what the user refused. A user's answer outlives later policy
//! decisions (`docs/spec/store.md`, "What a later decision may replace"),
//! and a server that keeps drawing refusals is not prompted again for a
//! while (`docs/spec/evaluation.md`, step 9, "Consent cooldown").

mod engine_support;

use std::sync::Arc;

use engine_support::*;
use mcpolicy_runtime::clock::timestamp;
use mcpolicy_runtime::engine::{
    CONSENT_COOLDOWN_PROMPTS, CONSENT_COOLDOWN_WINDOW_MS, Decision, Denial, Grant, PendingConsent,
};
use mcpolicy_runtime::frame::Timing;
use mcpolicy_runtime::identity::{
    approval_key, is_default_ignorable, presentation_normal, presentation_text, refusal_key,
    request_identity,
};
use mcpolicy_runtime::store::{DecisionKey, DecisionStore, MemoryStore, Verdict};
use mcpolicy_runtime::table::{BudgetMetric, CalendarUnit, Consent, Window, builtin};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn denial(decision: Decision) -> Denial {
    match decision {
        Decision::Deny(denial) => denial,
        other => panic!("expected a denial, got {other:?}"),
    }
}

fn allowed(decision: Decision) -> Grant {
    match decision {
        Decision::Allow(grant) | Decision::Trim(grant) => grant,
        other => panic!("expected an allow, got {other:?}"),
    }
}

fn pending(decision: Decision) -> PendingConsent {
    match decision {
        Decision::NeedsConsent(pending) => pending,
        other => panic!("expected a consent question, got {other:?}"),
    }
}

/// Runs `check` against the in-memory store and a fresh SQLite file.
fn with_each_store(check: impl Fn(Arc<dyn DecisionStore>)) {
    check(Arc::new(MemoryStore::new()));
    let dir = tempfile::tempdir().expect("tempdir");
    let store =
        mcpolicy_runtime::store::SqliteStore::open(dir.path().join("d.db")).expect("open store");
    check(Arc::new(store));
}

fn consent_block(consent: Consent) -> mcpolicy_runtime::table::EffectiveBlock {
    let mut block = open_block();
    block.consent = consent;
    block
}

/// The plain prompt a user approves or refuses in these tests.
fn base() -> Value {
    json!({
        "systemPrompt": "You summarise release notes.",
        "messages": [{"role": "user", "content": {"type": "text", "text": "Summarise the notes"}}],
        "modelPreferences": {"hints": [{"name": "claude"}], "costPriority": 0.5},
        "maxTokens": 200,
    })
}

fn with(mut params: Value, member: &str, value: Value) -> Value {
    params[member] = value;
    params
}

fn map(params: &Value) -> Map<String, Value> {
    params.as_object().expect("params are an object").clone()
}

fn fields() -> Vec<String> {
    [
        "systemPrompt",
        "messages",
        "includeContext",
        "modelPreferences",
    ]
    .map(String::from)
    .to_vec()
}

// ------------------------------------------------- what an approval covers

#[test]
fn an_approval_does_not_carry_over_to_tools_tool_choice_or_more_tokens() {
    with_each_store(|store| {
        let h = Harness::with_store(table(vec![("s", consent_block(Consent::First))]), store);
        let grant = allowed(resolve(pending(h.decide("s", &params(base()))), true));
        assert!(!grant.replayed());
        // The same prompt, as approved: no question.
        assert!(allowed(h.decide("s", &params(base()))).replayed());
        // What the user never saw: asked again, every time.
        let unseen = [
            with(
                base(),
                "tools",
                json!([{"name": "exec", "inputSchema": {"type": "object"}}]),
            ),
            with(
                with(
                    base(),
                    "tools",
                    json!([{"name": "exec", "inputSchema": {"type": "object"}}]),
                ),
                "toolChoice",
                json!({"mode": "required"}),
            ),
            with(base(), "maxTokens", json!(100_000)),
            with(base(), "temperature", json!(1.5)),
            with(base(), "stopSequences", json!(["\n\n"])),
            with(base(), "metadata", json!({"purpose": "other"})),
            with(
                base(),
                "systemPrompt",
                json!("You summarise release notes!"),
            ),
        ];
        for params_ in unseen {
            let p = pending(h.decide("s", &params(params_.clone())));
            // Abandoned, so that these prompts do not count as refusals.
            p.abandon().expect("abandon");
        }
    });
}

// --------------------------------------------------- what a refusal covers

/// Every variant of [`base`] the server sent after a refusal: the
/// user is shown nothing new by any of them.
fn unseen_variants() -> Vec<Value> {
    let mut b = base();
    vec![
        with(base(), "includeContext", json!("none")),
        {
            let mut p = base();
            p["modelPreferences"]["costPriority"] = json!(0.500_000_000_000_000_1);
            p
        },
        {
            let mut p = base();
            p["modelPreferences"]["hints"][0]["x-vendor"] = json!("fast");
            p
        },
        {
            let mut p = base();
            p["messages"][0]["_meta"] = json!({"trace": "48"});
            p
        },
        {
            let mut p = base();
            p["messages"][0]["content"]["annotations"] = json!({"audience": ["assistant"]});
            p
        },
        {
            b["messages"][0]["content"]["text"] = json!("Summarise the notes\u{200B}");
            b.clone()
        },
        {
            let mut p = base();
            p["messages"][0]["content"]["text"] = json!("Summa\u{00AD}rise the\u{2060} notes ");
            p["systemPrompt"] = json!("\u{FEFF}You summarise release notes.");
            p
        },
        {
            let mut p = base();
            p["messages"][0]["content"] = json!([p["messages"][0]["content"].clone()]);
            p
        },
    ]
}

#[test]
fn a_refusal_covers_every_variant_the_user_cannot_tell_apart() {
    with_each_store(|store| {
        let h = Harness::with_store(table(vec![("s", consent_block(Consent::Always))]), store);
        let first = denial(resolve(pending(h.decide("s", &params(base()))), false));
        assert_eq!(first.reason(), builtin::USER_DENIED);
        for (n, variant) in unseen_variants().into_iter().enumerate() {
            let again = denial(h.decide("s", &params(variant)));
            assert!(again.replayed(), "variant {n} was asked again");
            assert_eq!(data_text(&again), data_text(&first));
            assert_eq!(again.represented(), n as u64 + 1, "the retry loop sees it");
        }
        // Empty preferences and hints mean what absent ones do.
        let h = Harness::new(table(vec![("s", consent_block(Consent::Always))]));
        let plain = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "x"}}], "maxTokens": 5});
        denial(resolve(
            pending(h.decide("s", &params(plain.clone()))),
            false,
        ));
        for prefs in [json!({}), json!({"hints": []}), json!({"speedPriority": 1})] {
            assert!(
                denial(h.decide("s", &params(with(plain.clone(), "modelPreferences", prefs))))
                    .replayed()
            );
        }
    });
}

#[test]
fn the_refusal_key_of_a_request_in_normal_form_is_its_identity() {
    // Denials stored before the two keys keep replaying: every frozen vector
    // whose params are already presentation-normal keeps its identity.
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/cases/identity/vectors.json"
    );
    let vectors: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("vectors")).expect("JSON");
    let mut normal = 0;
    for vector in vectors["vectors"].as_array().expect("vectors") {
        let fields: Vec<String> = serde_json::from_value(vector["fields"].clone()).expect("fields");
        let params = map(&vector["params"]);
        let server = vector["server"].as_str().expect("server");
        let frozen = vector["identity"].as_str().expect("identity");
        assert_eq!(request_identity(server, &params, &fields).as_str(), frozen);
        let as_given: Map<String, Value> = fields
            .iter()
            .filter_map(|f| params.get(f).map(|v| (f.clone(), v.clone())))
            .collect();
        if presentation_normal(&params, &fields) == as_given {
            normal += 1;
            assert_eq!(
                refusal_key(server, &params, &fields).as_str(),
                frozen,
                "{}",
                vector["name"]
            );
        }
    }
    assert!(
        normal >= 10,
        "most frozen vectors are in normal form ({normal})"
    );
}

#[test]
fn default_ignorable_code_points_are_removed_and_ends_trimmed() {
    for c in [
        '\u{00AD}',
        '\u{034F}',
        '\u{061C}',
        '\u{115F}',
        '\u{180E}',
        '\u{200B}',
        '\u{200C}',
        '\u{200D}',
        '\u{200E}',
        '\u{202E}',
        '\u{2060}',
        '\u{2066}',
        '\u{3164}',
        '\u{FE0F}',
        '\u{FEFF}',
        '\u{FFA0}',
        '\u{1BCA0}',
        '\u{1D173}',
        '\u{E0001}',
        '\u{E0041}',
        '\u{E0100}',
    ] {
        assert!(is_default_ignorable(c), "U+{:04X}", u32::from(c));
    }
    // White space and visible format-like characters are not ignorable.
    for c in [
        ' ',
        '\n',
        'a',
        '\u{00A0}',
        '\u{0600}',
        '\u{FFF9}',
        '\u{2028}',
        '\u{13430}',
    ] {
        assert!(!is_default_ignorable(c), "U+{:04X}", u32::from(c));
    }
    assert_eq!(presentation_text("  a\u{200B}b  c\u{FEFF}\n"), "ab  c");
    assert_eq!(presentation_text("\u{200B} \u{200B}"), "");
}

// ------------------------------------- the property: a server that varies

/// One variation a server may apply that the user cannot see.
#[derive(Debug, Clone, Copy)]
enum Unseen {
    ContextNone,
    EmptyPreferences,
    EmptyHints,
    PriorityNoise,
    UnknownHintMember,
    MessageMeta,
    UnknownMessageMember,
    ContentAnnotations,
    ContentMeta,
    TrailingZeroWidth,
    SoftHyphen,
    ByteOrderMark,
    VariationSelector,
    TagCharacters,
    OuterWhiteSpace,
    ContentAsList,
    PreferencesMeta,
}

fn unseen() -> impl Strategy<Value = Unseen> {
    prop_oneof![
        Just(Unseen::ContextNone),
        Just(Unseen::EmptyPreferences),
        Just(Unseen::EmptyHints),
        Just(Unseen::PriorityNoise),
        Just(Unseen::UnknownHintMember),
        Just(Unseen::MessageMeta),
        Just(Unseen::UnknownMessageMember),
        Just(Unseen::ContentAnnotations),
        Just(Unseen::ContentMeta),
        Just(Unseen::TrailingZeroWidth),
        Just(Unseen::SoftHyphen),
        Just(Unseen::ByteOrderMark),
        Just(Unseen::VariationSelector),
        Just(Unseen::TagCharacters),
        Just(Unseen::OuterWhiteSpace),
        Just(Unseen::ContentAsList),
        Just(Unseen::PreferencesMeta),
    ]
}

/// A change the user is shown (or the client runs with): an approval must
/// not cover it.
#[derive(Debug, Clone)]
enum Seen {
    Tools,
    ToolChoice,
    MaxTokens(u64),
    Temperature(f64),
    StopSequences,
    Metadata,
    Text(char),
    SystemPrompt(char),
    Hint(String),
    Priority(f64),
    Context,
}

fn seen() -> impl Strategy<Value = Seen> {
    prop_oneof![
        Just(Seen::Tools),
        Just(Seen::ToolChoice),
        (201u64..1_000_000).prop_map(Seen::MaxTokens),
        (0.0f64..2.0).prop_map(Seen::Temperature),
        Just(Seen::StopSequences),
        Just(Seen::Metadata),
        proptest::char::range('!', '~').prop_map(Seen::Text),
        proptest::char::range('\u{A1}', '\u{2FF}').prop_map(Seen::SystemPrompt),
        "[a-z]{1,8}".prop_map(Seen::Hint),
        (0.0f64..1.0).prop_map(Seen::Priority),
        Just(Seen::Context),
    ]
}

/// The base request of the property, with `text` as its message.
fn prompt(text: &str, with_prefs: bool) -> Value {
    let mut p = json!({
        "systemPrompt": "Be brief.",
        "messages": [
            {"role": "user", "content": {"type": "text", "text": text}},
            {"role": "assistant", "content": {"type": "text", "text": "Which part?"}},
        ],
        "maxTokens": 200,
    });
    if with_prefs {
        p["modelPreferences"] = json!({"hints": [{"name": "claude"}], "costPriority": 0.5});
    }
    p
}

fn apply_unseen(p: &mut Value, u: Unseen, at: usize) {
    let m = at % 2;
    let text = |p: &mut Value, f: &dyn Fn(&str) -> String| {
        let t = p["messages"][m]["content"]["text"].as_str().map(f);
        if let Some(t) = t {
            p["messages"][m]["content"]["text"] = json!(t);
        }
    };
    match u {
        Unseen::ContextNone => p["includeContext"] = json!("none"),
        Unseen::EmptyPreferences => {
            if p.get("modelPreferences").is_none() {
                p["modelPreferences"] = json!({});
            }
        }
        Unseen::EmptyHints => {
            if p.get("modelPreferences").is_none() {
                p["modelPreferences"] = json!({"hints": []});
            }
        }
        Unseen::PriorityNoise => {
            if let Some(prefs) = p.get_mut("modelPreferences").and_then(Value::as_object_mut) {
                let noisy = prefs
                    .get("costPriority")
                    .and_then(Value::as_f64)
                    .map_or(0.25, |x| f64::from_bits(x.to_bits() + 1));
                prefs.insert("costPriority".into(), json!(noisy));
                prefs.insert("speedPriority".into(), json!(at as f64 / 100.0));
            }
        }
        Unseen::UnknownHintMember => {
            if let Some(hint) = p.pointer_mut("/modelPreferences/hints/0") {
                hint["vendor-extra"] = json!(at);
            }
        }
        Unseen::MessageMeta => p["messages"][m]["_meta"] = json!({"n": at}),
        Unseen::UnknownMessageMember => p["messages"][m]["x"] = json!(at),
        Unseen::ContentAnnotations => {
            if p["messages"][m]["content"].is_object() {
                p["messages"][m]["content"]["annotations"] =
                    json!({"audience": ["user"], "priority": 0.3});
            }
        }
        Unseen::ContentMeta => {
            if p["messages"][m]["content"].is_object() {
                p["messages"][m]["content"]["_meta"] = json!({"n": at});
            }
        }
        Unseen::TrailingZeroWidth => text(p, &|t| format!("{t}\u{200B}")),
        Unseen::SoftHyphen => text(p, &|t| {
            let cut = t.char_indices().nth(2).map_or(t.len(), |(i, _)| i);
            format!("{}\u{00AD}{}", &t[..cut], &t[cut..])
        }),
        Unseen::ByteOrderMark => {
            let s = p["systemPrompt"].as_str().unwrap_or_default().to_owned();
            p["systemPrompt"] = json!(format!("\u{FEFF}{s}"));
        }
        Unseen::VariationSelector => text(p, &|t| format!("{t}\u{FE0F}")),
        Unseen::TagCharacters => text(p, &|t| format!("{t}\u{E0074}\u{E0061}\u{E0067}")),
        Unseen::OuterWhiteSpace => text(p, &|t| format!("  {t}\n")),
        Unseen::ContentAsList => {
            if p["messages"][m]["content"].is_object() {
                let block = p["messages"][m]["content"].take();
                p["messages"][m]["content"] = json!([block]);
            }
        }
        Unseen::PreferencesMeta => {
            if let Some(prefs) = p.get_mut("modelPreferences").and_then(Value::as_object_mut) {
                prefs.insert("_meta".into(), json!({"n": at}));
            }
        }
    }
}

fn apply_seen(p: &mut Value, s: &Seen) {
    match s {
        Seen::Tools => p["tools"] = json!([{"name": "exec", "inputSchema": {"type": "object"}}]),
        Seen::ToolChoice => p["toolChoice"] = json!({"mode": "required"}),
        Seen::MaxTokens(n) => p["maxTokens"] = json!(n),
        Seen::Temperature(t) => p["temperature"] = json!(t),
        Seen::StopSequences => p["stopSequences"] = json!(["END"]),
        Seen::Metadata => p["metadata"] = json!({"k": "v"}),
        Seen::Text(c) => {
            let t = p["messages"][0]["content"]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            p["messages"][0]["content"]["text"] = json!(format!("{t} {c}"));
        }
        Seen::SystemPrompt(c) => p["systemPrompt"] = json!(format!("Be brief{c}")),
        Seen::Hint(name) => {
            p["modelPreferences"] =
                json!({"hints": [{"name": format!("m-{name}")}], "costPriority": 0.5});
        }
        Seen::Priority(x) => {
            p["modelPreferences"] = json!({"hints": [{"name": "claude"}], "costPriority": x});
        }
        Seen::Context => p["includeContext"] = json!("thisServer"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// One refusal covers every variant along every axis at once: the same
    /// refusal key, and, through the engine, the stored refusal answers
    /// each variant without asking.
    #[test]
    fn one_refusal_covers_every_unseen_variant(
        text in "[a-z]{1,12}( [a-z]{1,8}){0,3}",
        with_prefs in any::<bool>(),
        variants in proptest::collection::vec(proptest::collection::vec(unseen(), 1..8), 1..6),
    ) {
        let original = prompt(&text, with_prefs);
        let key = refusal_key("s", &map(&original), &fields());
        let h = Harness::new(table(vec![("s", consent_block(Consent::Always))]));
        let refused = denial(resolve(pending(h.decide("s", &params(original.clone()))), false));
        prop_assert_eq!(refused.reason(), builtin::USER_DENIED);
        for (n, axes) in variants.iter().enumerate() {
            let mut variant = original.clone();
            for (at, axis) in axes.iter().enumerate() {
                apply_unseen(&mut variant, *axis, at + n);
            }
            prop_assert_eq!(&refusal_key("s", &map(&variant), &fields()), &key, "{:?}", axes);
            let again = h.decide("s", &params(variant));
            prop_assert!(matches!(&again, Decision::Deny(d) if d.replayed()), "{:?}: {:?}", axes, again);
        }
    }

    /// Any change the user is shown, or the client runs with, makes the
    /// approval not apply: another approval key, and the user is asked.
    #[test]
    fn any_seen_change_makes_an_approval_not_apply(
        text in "[a-z]{1,12}",
        change in seen(),
        unseen_too in proptest::collection::vec(unseen(), 0..4),
    ) {
        let original = prompt(&text, true);
        let mut changed = original.clone();
        apply_seen(&mut changed, &change);
        for (at, axis) in unseen_too.iter().enumerate() {
            apply_unseen(&mut changed, *axis, at);
        }
        prop_assert_ne!(approval_key("s", &map(&changed)), approval_key("s", &map(&original)));
        let h = Harness::new(table(vec![("s", consent_block(Consent::First))]));
        allowed(resolve(pending(h.decide("s", &params(original.clone()))), true));
        prop_assert!(allowed(h.decide("s", &params(original))).replayed());
        let again = h.decide("s", &params(changed));
        prop_assert!(matches!(again, Decision::NeedsConsent(_)), "{:?}: {:?}", change, again);
    }
}

// ------------------------------- a user's answer outlives a budget denial

#[test]
fn a_consent_approval_survives_a_budget_denial() {
    with_each_store(|store| {
        let mut block = consent_block(Consent::First);
        block.budgets = vec![budget(
            BudgetMetric::Requests,
            1,
            Window::Calendar(CalendarUnit::Day),
        )];
        let h = Harness::with_store(table(vec![("s", block)]), store);
        let request = params(base());
        let grant = allowed(resolve(pending(h.decide("s", &request)), true));
        let approval = DecisionKey::new("s", grant.approval_key().expect("consent first"));
        // The same request again the same day: the budget refuses it.
        let refused = denial(h.decide("s", &request));
        assert_eq!(refused.reason(), builtin::BUDGET_EXHAUSTED);
        let stored = h
            .store
            .get(&approval)
            .expect("get")
            .expect("the approval is kept");
        assert_eq!(
            (stored.verdict, &*stored.reason),
            (Verdict::Allow, builtin::USER_APPROVED)
        );
        // After the daily reset: run on the stored approval, without asking.
        h.clock.set(timestamp(2026, 3, 11, 0, 0, 0));
        assert!(allowed(h.decide("s", &request)).replayed());
    });
}

#[test]
fn a_deadline_miss_does_not_cost_the_approval() {
    let mut block = consent_block(Consent::First);
    block.deadline = deadline(1_000);
    let h = Harness::new(table(vec![("s", block)]));
    let request = params(base());
    let grant = allowed(resolve(pending(h.decide("s", &request)), true));
    let missed = grant.deadline_missed().expect("store");
    assert_eq!(missed.reason(), builtin::DEADLINE);
    assert!(denial(h.decide("s", &request)).replayed());
    h.clock.advance(30_000);
    assert!(
        allowed(h.decide("s", &request)).replayed(),
        "asked again after a deadline miss"
    );
}

// ----------------------------------------------------- consent cooldown

#[test]
fn a_server_that_keeps_drawing_refusals_is_not_prompted_again() {
    with_each_store(|store| {
        let both = || {
            table(vec![
                ("s", consent_block(Consent::Always)),
                ("t", consent_block(Consent::Always)),
            ])
        };
        let h = Harness::with_store(both(), store);
        // A second engine on the same store: the count holds across processes.
        let other = h.reload(both());
        // Approved prompts do not count.
        for n in 0..5 {
            allowed(resolve(
                pending(h.decide("s", &simple(&format!("ok {n}")))),
                true,
            ));
        }
        for n in 0..CONSENT_COOLDOWN_PROMPTS {
            let engine = if n % 2 == 0 { &h } else { &other };
            let refused = denial(resolve(
                pending(engine.decide("s", &simple(&format!("ask {n}")))),
                false,
            ));
            assert_eq!(refused.reason(), builtin::USER_DENIED);
            h.clock.advance(1_000);
        }
        let cooled = denial(other.decide("s", &simple("yet another")));
        assert_eq!(cooled.reason(), builtin::CONSENT_COOLDOWN);
        assert!(cooled.retryable());
        let first_refusal_leaves =
            CONSENT_COOLDOWN_WINDOW_MS - 1_000 * CONSENT_COOLDOWN_PROMPTS as i64;
        assert_eq!(
            cooled.timing(),
            Some(Timing::RetryAfter(
                (first_refusal_leaves as u64).div_ceil(1000)
            ))
        );
        assert_eq!(
            cooled.cause().statement,
            Some(mcpolicy_runtime::engine::Statement::Consent)
        );
        // Another server is not affected.
        pending(h.decide("t", &simple("yet another")));
        // Once the first refusal has left the window, the user is asked again.
        h.clock.advance(first_refusal_leaves);
        pending(h.decide("s", &simple("and another")));
    });
}

#[test]
fn unanswered_prompts_count_and_abandoned_ones_do_not() {
    let h = Harness::new(table(vec![("s", consent_block(Consent::Always))]));
    let waiting: Vec<PendingConsent> = (0..CONSENT_COOLDOWN_PROMPTS)
        .map(|n| pending(h.decide("s", &simple(&format!("w {n}")))))
        .collect();
    assert_eq!(
        denial(h.decide("s", &simple("more"))).reason(),
        builtin::CONSENT_COOLDOWN
    );
    for p in waiting {
        p.abandon().expect("abandon");
    }
    pending(h.decide("s", &simple("more, later")));
}
