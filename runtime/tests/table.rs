//! Loading a table: what the runtime refuses (fail closed) and how a
//! server id finds its entry.
//!
//! - A statement may deny only with its own built-in reason or a policy's
//!   own reason: `user.*` and the other `policy.*` reasons carry meanings the
//!   engine relies on (`docs/spec/language.md`, "Rules on reasons").
//! - Server ids and patterns are compared in NFC: canonically equivalent
//!   spellings of an id find the same entry and key the same stored
//!   decisions (`docs/spec/language.md`, "Server patterns").
//!
//! Property tests run 256 cases by default; long mode:
//! `PROPTEST_CASES=100000 cargo test -p mcpolicy-runtime --test table`.

mod engine_support;

use engine_support::*;
use mcpolicy_runtime::engine::Decision;
use mcpolicy_runtime::table::{
    EffectiveBlock, ReasonSpec, Switch, TABLE_FORMAT, Table, TableError, Ttl, builtin,
};
use mcpolicy_runtime::{Error, Policy};
use proptest::prelude::*;
use unicode_normalization::UnicodeNormalization;

fn custom(name: &str) -> (String, ReasonSpec) {
    (
        name.to_owned(),
        ReasonSpec {
            retryable: false,
            ttl: Ttl::Forever,
            code: CODE,
            message: format!("Sampling denied: {name}"),
        },
    )
}

/// A table of one server entry whose block is `block`, written as JSON the
/// way a hand-edited table would be (digests recomputed, so only the rule
/// under test can refuse it).
fn hand_written(block: EffectiveBlock, extra: &[&str]) -> Vec<u8> {
    let mut reasons = reasons();
    reasons.extend(extra.iter().map(|n| custom(n)));
    let table = Table {
        format: TABLE_FORMAT.to_owned(),
        protocol: Default::default(),
        error_code: CODE,
        // The default identity: a non-default one is covered by the entry digest.
        identity: mcpolicy_runtime::table::DEFAULT_IDENTITY
            .map(String::from)
            .to_vec(),
        servers: vec![entry("srv", block, &reasons)],
        fallback: entry("*", open_block(), &reasons),
        reasons,
    };
    table.to_json().into_bytes()
}

/// Every statement that names a reason, as (its built-in reason, a block
/// whose statement names `reason`).
fn statements(reason: &str) -> Vec<(&'static str, EffectiveBlock)> {
    let with = |f: &dyn Fn(&mut EffectiveBlock)| {
        let mut block = open_block();
        f(&mut block);
        block
    };
    let r = reason.to_owned();
    vec![
        (
            builtin::SAMPLING_DISABLED,
            with(&|b| {
                b.sampling = Switch {
                    enabled: false,
                    reason: r.clone(),
                }
            }),
        ),
        (
            builtin::TOOLS_DISABLED,
            with(&|b| {
                b.tools = Switch {
                    enabled: false,
                    reason: r.clone(),
                }
            }),
        ),
        (
            builtin::INPUT_TOO_LARGE,
            with(&|b| {
                b.max_input = limit(10).map(|mut l| {
                    l.reason = r.clone();
                    l
                })
            }),
        ),
        (
            builtin::INPUT_TOO_LARGE,
            with(&|b| {
                b.max_messages = limit(10).map(|mut l| {
                    l.reason = r.clone();
                    l
                })
            }),
        ),
        (
            builtin::RATE_LIMIT,
            with(&|b| {
                b.rate = rate(1, 1000).map(|mut x| {
                    x.reason = r.clone();
                    x
                })
            }),
        ),
        (
            builtin::BUDGET_EXHAUSTED,
            with(&|b| {
                let mut budget = budget(
                    mcpolicy_runtime::table::BudgetMetric::Requests,
                    1,
                    mcpolicy_runtime::table::Window::RollingMs(1000),
                );
                budget.reason = r.clone();
                b.budgets = vec![budget];
            }),
        ),
        (
            builtin::DEADLINE,
            with(&|b| {
                b.deadline = deadline(1000).map(|mut d| {
                    d.reason = r.clone();
                    d
                })
            }),
        ),
    ]
}

/// `docs/spec/language.md`, "Rules on reasons": `tools off as user.denied` in a hand-written table.
/// Loading it would make a stored user refusal look like a tools denial
/// (skipped for requests without tools): refused.
#[test]
fn a_statement_denying_as_user_denied_is_refused() {
    let mut block = open_block();
    block.tools = Switch {
        enabled: false,
        reason: builtin::USER_DENIED.into(),
    };
    let err = Table::from_json(&hand_written(block, &[])).expect_err("must refuse");
    assert!(
        matches!(&err, TableError::ReservedReason { reason, .. } if reason == "user.denied"),
        "{err}"
    );
    assert!(err.to_string().contains("user.denied"), "{err}");
}

/// Every statement × every reserved reason that is not its own: refused;
/// its own built-in reason and a policy's own reason: loaded.
#[test]
fn reserved_reasons_are_refused_on_every_other_statement() {
    let reserved: Vec<&str> = builtin::ALL.iter().map(|b| b.name).collect();
    // A reason of a reserved namespace that is not built in is refused
    // where it is declared (`table_mutations::values_the_compiler_never_writes_are_refused`).
    for reason in &reserved {
        for (own, block) in statements(reason) {
            let bytes = hand_written(block, &[]);
            let loaded = Table::from_json(&bytes);
            if reason == &own {
                assert!(loaded.is_ok(), "{own} as itself: {loaded:?}");
            } else {
                assert!(
                    matches!(loaded, Err(TableError::ReservedReason { .. })),
                    "statement of {own} as {reason} was loaded"
                );
            }
        }
    }
    for (own, block) in statements("acme.mine") {
        let loaded = Table::from_json(&hand_written(block, &["acme.mine"]));
        assert!(loaded.is_ok(), "{own} as acme.mine: {loaded:?}");
    }
}

/// The engine skips a stored denial whose reason is the `tools` statement's
/// for a request without tools; a reason `tools` shares with another
/// statement of the block would skip (or replay) that statement's denials
/// too. Refused for every other statement.
#[test]
fn a_reason_shared_by_tools_and_another_statement_is_refused() {
    for (own, mut block) in statements("acme.shared") {
        if own == builtin::TOOLS_DISABLED {
            continue;
        }
        // `sampling on as acme.shared`: a stored tools denial would then be
        // replayed for requests without tools.
        block.sampling.enabled = true;
        block.tools = Switch {
            enabled: false,
            reason: "acme.shared".into(),
        };
        let loaded = Table::from_json(&hand_written(block, &["acme.shared"]));
        assert!(
            matches!(loaded, Err(TableError::SharedToolsReason { .. })),
            "tools sharing with the statement of {own}: {loaded:?}"
        );
    }
    // `sampling off` may share it: every request is denied before `tools`.
    let mut block = open_block();
    block.sampling = Switch {
        enabled: false,
        reason: "acme.shared".into(),
    };
    block.tools = Switch {
        enabled: false,
        reason: "acme.shared".into(),
    };
    assert!(Table::from_json(&hand_written(block, &["acme.shared"])).is_ok());
    // Two statements other than `tools` may share a reason.
    let mut block = open_block();
    block.rate = rate(1, 1000).map(|mut r| {
        r.reason = "acme.shared".into();
        r
    });
    block.deadline = deadline(1000).map(|mut d| {
        d.reason = "acme.shared".into();
        d
    });
    assert!(Table::from_json(&hand_written(block, &["acme.shared"])).is_ok());
}

/// What the rule above prevents: `deadline … as acme.x` with `tools off as
/// acme.x`. A reported deadline miss is stored (retry after the reason's
/// ttl), but the engine reads the stored `acme.x` as a tools denial and
/// skips it for the same request without tools, which then runs again at
/// once. Such a table is refused as a file and as a [`Policy`].
#[test]
fn a_shared_tools_reason_would_skip_a_stored_deadline_denial() {
    let mut reasons = reasons();
    reasons.extend([custom("acme.x")]);
    let mut block = open_block();
    block.tools = Switch {
        enabled: false,
        reason: "acme.x".into(),
    };
    block.deadline = deadline(1000).map(|mut d| {
        d.reason = "acme.x".into();
        d
    });
    let table = Table {
        format: TABLE_FORMAT.to_owned(),
        protocol: Default::default(),
        error_code: CODE,
        // The default identity: a non-default one is covered by the entry digest.
        identity: mcpolicy_runtime::table::DEFAULT_IDENTITY
            .map(String::from)
            .to_vec(),
        servers: vec![entry("srv", block, &reasons)],
        fallback: entry("*", open_block(), &reasons),
        reasons,
    };
    assert!(matches!(
        Table::from_json(table.to_json().as_bytes()),
        Err(TableError::SharedToolsReason { .. })
    ));
    // Nor can it be run: an engine runs only a verified `Policy`, so the
    // bypass (a deadline denial skipped as a tools denial) has no way in.
    assert!(matches!(
        Policy::verify(table),
        Err(Error::Table(TableError::SharedToolsReason { .. }))
    ));
}

// ---- server ids in NFC (`docs/spec/language.md`, "Server patterns") ----

/// `server "café" { sampling off }` and the NFD id
/// `cafe\u{301}` (what macOS file names give).
#[test]
fn an_nfd_server_id_finds_its_nfc_block() {
    let mut off = open_block();
    off.sampling.enabled = false;
    let table = table(vec![("caf\u{e9}", off)]);
    assert_eq!(table.entry_for("cafe\u{301}").pattern, "caf\u{e9}");
    let h = Harness::new(table);
    let decision = h.decide("cafe\u{301}", &simple("hi"));
    assert_eq!(deny_reason(&decision), Some(builtin::SAMPLING_DISABLED));
    let Decision::Deny(denial) = decision else {
        unreachable!()
    };
    assert_eq!(denial.server(), "caf\u{e9}", "the id is reported in NFC");
    // The NFC id replays the decision stored under the NFD one: one key.
    let Decision::Deny(again) = h.decide("caf\u{e9}", &simple("hi")) else {
        panic!("not a denial")
    };
    assert!(again.replayed(), "stored under another key");
}

/// A hand-written table whose patterns are not in NFC matches NFC and NFD
/// ids alike.
#[test]
fn a_non_nfc_pattern_in_a_table_matches_after_loading() {
    let mut off = open_block();
    off.sampling.enabled = false;
    let reasons = reasons();
    let table = Table {
        format: TABLE_FORMAT.to_owned(),
        protocol: Default::default(),
        error_code: CODE,
        // The default identity: a non-default one is covered by the entry digest.
        identity: mcpolicy_runtime::table::DEFAULT_IDENTITY
            .map(String::from)
            .to_vec(),
        servers: vec![
            entry("A\u{30a}ngstr\u{f6}m-*", off.clone(), &reasons),
            entry("cafe\u{301}", off, &reasons),
        ],
        fallback: entry("*", open_block(), &reasons),
        reasons,
    };
    let loaded = Table::from_json(table.to_json().as_bytes()).expect("loads");
    for id in [
        "\u{c5}ngstr\u{f6}m-x",
        "\u{212b}ngstro\u{308}m-x",
        "caf\u{e9}",
    ] {
        assert_ne!(loaded.entry_for(id).pattern, "*", "{id:?}");
        let h = Harness::new(loaded.clone());
        assert_eq!(
            deny_reason(&h.decide(id, &simple("hi"))),
            Some(builtin::SAMPLING_DISABLED),
            "{id:?}"
        );
    }
}

/// Pieces of ids and patterns: letters with and without combining marks in
/// every normal form, singletons that NFC replaces (Å as U+212B, Ω as
/// U+2126), Hangul in jamo, and the two wildcards.
const PIECES: &[&str] = &[
    "a",
    "e",
    "\u{e9}",
    "e\u{301}",
    "\u{301}",
    "\u{c5}",
    "A\u{30a}",
    "\u{212b}",
    "\u{2126}",
    "\u{3a9}",
    "\u{ac00}",
    "\u{1100}\u{1161}",
    "\u{1e69}",
    "s\u{323}\u{307}",
    "s\u{307}\u{323}",
    "-",
];

fn piece_string(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(PIECES), 0..max).prop_map(|p| p.concat())
}

fn pattern() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            6 => prop::sample::select(PIECES),
            1 => Just("*"),
            1 => Just("?"),
        ],
        1..5,
    )
    .prop_map(|p| p.concat())
}

/// A table whose entry `i` denies with its own reason `t.r{i}`, so the
/// decision names the entry that governed it.
fn labelled_table(patterns: &[String]) -> Table {
    let mut reasons = reasons();
    reasons.extend((0..patterns.len()).map(|i| custom(&format!("t.r{i}"))));
    reasons.extend([custom("t.fallback")]);
    let block = |name: String| {
        let mut b = open_block();
        b.sampling = Switch {
            enabled: false,
            reason: name,
        };
        b
    };
    Table {
        format: TABLE_FORMAT.to_owned(),
        protocol: Default::default(),
        error_code: CODE,
        // The default identity: a non-default one is covered by the entry digest.
        identity: mcpolicy_runtime::table::DEFAULT_IDENTITY
            .map(String::from)
            .to_vec(),
        servers: patterns
            .iter()
            .enumerate()
            .map(|(i, p)| entry(p, block(format!("t.r{i}")), &reasons))
            .collect(),
        fallback: entry("*", block("t.fallback".into()), &reasons),
        reasons,
    }
}

proptest! {
    /// lookup(NFD(s)) == lookup(NFC(s)) == lookup(s), by the table's own
    /// lookup and by the engine's (exact-id index and globs), for random
    /// ids and random pattern sets written in any normal form; the
    /// governing entry is the first whose NFC pattern matches NFC(s).
    #[test]
    fn lookup_is_the_same_for_every_normal_form(
        patterns in prop::collection::vec(pattern(), 0..6),
        id in piece_string(5),
    ) {
        let table = labelled_table(&patterns);
        let loaded = Table::from_json(table.to_json().as_bytes()).expect("loads");
        let spellings = [
            id.clone(),
            id.nfc().collect::<String>(),
            id.nfd().collect::<String>(),
        ];
        let nfc_id: String = id.nfc().collect();
        let expected = patterns
            .iter()
            .position(|p| {
                mcpolicy_runtime::table::pattern::matches(&p.nfc().collect::<String>(), &nfc_id)
            })
            .map_or("t.fallback".to_owned(), |i| format!("t.r{i}"));
        let h = Harness::new(table.clone());
        let h_loaded = Harness::new(loaded.clone());
        for s in &spellings {
            let by_table = table.entry_for(s).block.sampling.reason.clone();
            prop_assert_eq!(&by_table, &expected, "Table::entry_for({:?})", s);
            let by_loaded = loaded.entry_for(s).block.sampling.reason.clone();
            prop_assert_eq!(&by_loaded, &expected, "loaded entry_for({:?})", s);
            for harness in [&h, &h_loaded] {
                let decision = harness.decide(s, &simple("hi"));
                prop_assert_eq!(deny_reason(&decision), Some(expected.as_str()), "engine({:?})", s);
            }
        }
    }

    /// A model hint is allowed, in every normal form, exactly when its NFC
    /// spelling matches the NFC spelling of a `models` pattern, however
    /// the patterns are written: the `models` trim keeps it or drops it
    /// alike, and `model_allowed` agrees.
    #[test]
    fn model_hints_match_in_every_normal_form(
        patterns in prop::collection::vec(pattern(), 1..4),
        name in piece_string(5),
    ) {
        // A table never repeats a pattern (the loader refuses it).
        let mut seen = std::collections::HashSet::new();
        prop_assume!(patterns.iter().all(|p| seen.insert(p.nfc().collect::<String>())));
        let mut block = open_block();
        block.models = Some(patterns.clone());
        let h = Harness::new(table(vec![("s", block)]));
        let nfc_name: String = name.nfc().collect();
        let allowed = patterns.iter().any(|p| {
            mcpolicy_runtime::table::pattern::matches(&p.nfc().collect::<String>(), &nfc_name)
        });
        for spelling in [name.clone(), nfc_name.clone(), name.nfd().collect::<String>()] {
            let request = params(serde_json::json!({
                "messages": [],
                "maxTokens": 10,
                "modelPreferences": {"hints": [{"name": spelling}]},
            }));
            match h.decide("s", &request) {
                Decision::Allow(grant) => {
                    prop_assert!(allowed, "{:?} kept against {:?}", spelling, patterns);
                    prop_assert!(grant.model_allowed(&spelling));
                }
                Decision::Trim(grant) => {
                    prop_assert!(!allowed, "{:?} dropped against {:?}", spelling, patterns);
                    prop_assert!(!grant.model_allowed(&spelling));
                }
                other => prop_assert!(false, "{:?}", other),
            }
        }
    }
}

/// Model names are compared in NFC too: a hint spelt in NFD is the model a
/// `models` pattern names in NFC (and the other way round), so a request
/// is neither trimmed for its spelling nor let past the list by it.
#[test]
fn model_hints_and_patterns_match_in_every_normal_form() {
    let mut block = open_block();
    block.models = Some(vec!["cafe\u{301}-*".into(), "\u{c5}ngstr\u{f6}m".into()]);
    let h = Harness::new(table(vec![("s", block)]));
    let request = params(serde_json::json!({
        "messages": [],
        "maxTokens": 10,
        "modelPreferences": {"hints": [{"name": "caf\u{e9}-1"}, {"name": "A\u{30a}ngstro\u{308}m"}]},
    }));
    let Decision::Allow(grant) = h.decide("s", &request) else {
        panic!("both hints are allowed models: no trim")
    };
    assert!(grant.model_allowed("cafe\u{301}-2"));
    assert!(grant.model_allowed("caf\u{e9}-2"));
    assert!(!grant.model_allowed("cafe-2"));
}

/// Codes are JSON-RPC error codes, `i32` in every type of the runtime: a
/// hand-written table with a wider `error_code` or reason code is refused
/// with the error that names it (`table.code_out_of_range`), not as a
/// malformed file (the checker refuses such a policy too).
#[test]
fn a_code_outside_32_bits_is_refused() {
    let mut reasons = reasons();
    let (name, spec) = custom("acme.wide");
    reasons.insert(name, spec);
    let mut table = table(vec![("srv", open_block())]);
    table.reasons = reasons;
    let block = open_block();
    table.servers = vec![entry("srv", block.clone(), &table.reasons)];
    table.fallback = entry("*", block, &table.reasons);
    let json: serde_json::Value = serde_json::from_str(&table.to_json()).expect("a table is JSON");
    for (pointer, code, what) in [
        ("/error_code", i64::from(i32::MAX) + 1, "error_code"),
        (
            "/reasons/acme.wide/code",
            i64::from(i32::MIN) - 1,
            "reason `acme.wide`",
        ),
    ] {
        let mut wide = json.clone();
        *wide.pointer_mut(pointer).expect("the code is there") = code.into();
        let error = Table::from_json(wide.to_string().as_bytes()).expect_err("refused");
        assert_eq!(error.code(), "table.code_out_of_range", "{error}");
        assert!(
            matches!(&error, TableError::CodeOutOfRange { what: w, code: c } if w == what && *c == code),
            "{error:?}"
        );
        assert!(matches!(
            Policy::from_json(wide.to_string().as_bytes()),
            Err(Error::Table(TableError::CodeOutOfRange { .. }))
        ));
    }
    // The bounds themselves fit.
    let mut narrow = table;
    narrow.error_code = i32::MIN;
    assert!(Policy::verify(narrow).is_ok());
}
