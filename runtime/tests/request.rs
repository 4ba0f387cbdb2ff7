//! Strict request parsing and `sampling/createMessage` validation.

use mcpolicy_runtime::jsonrpc::{INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR};
use mcpolicy_runtime::request::{
    Limits, RequestError, envelope_id, parse_strict, parse_strict_with, validate_params_for,
    validate_sampling, validate_sampling_for,
};
use mcpolicy_runtime::table::ProtocolRevision;
use proptest::prelude::*;
use serde_json::{Value, json};

/// `default_cases` cases, or `PROPTEST_CASES` from the environment for a
/// long run (`PROPTEST_CASES=100000 cargo test -p mcpolicy-runtime --test …`).
fn config(default_cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default_cases);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

const PARAMS: &str =
    r#"{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":100}"#;

fn request_with(params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{params}}}"#)
}

fn refuse(text: &str) -> RequestError {
    match parse_strict(text.as_bytes()) {
        Err(error) => error,
        Ok(value) => validate_sampling(value).expect_err("must be refused"),
    }
}

#[test]
fn a_whole_request_is_accepted() {
    let value = parse_strict(request_with(PARAMS).as_bytes()).expect("parses");
    let request = validate_sampling(value).expect("valid");
    assert_eq!(request.id, Some(json!(1)));
    assert_eq!(request.max_tokens(), 100);
    assert_eq!(request.messages().len(), 1);
}

#[test]
fn bare_params_are_accepted() {
    let request = validate_sampling(parse_strict(PARAMS.as_bytes()).expect("parses")).expect("ok");
    assert_eq!(request.id, None);
    assert_eq!(request.params()["maxTokens"], json!(100));
}

/// Params an SDK already read are validated as they are: the same request
/// and the same refusals as the same params inside a request, and members
/// named like an envelope's (`id`, `method`) are params, never an envelope.
#[test]
fn params_read_by_an_sdk_validate_as_params() {
    for revision in ProtocolRevision::ALL {
        for params in [
            PARAMS,
            r#"{"messages":[],"maxTokens":9e2}"#,
            r#"{"messages":[],"maxTokens":0}"#,
            r#"{"messages":"hi","maxTokens":5}"#,
            r#"{"messages":[],"maxTokens":5,"includeContext":"everything"}"#,
        ] {
            let Value::Object(map) = serde_json::from_str(params).expect("JSON") else {
                panic!("{params} is an object");
            };
            let typed = validate_params_for(map, revision);
            let framed = validate_sampling_for(
                parse_strict(request_with(params).as_bytes()).expect("parses"),
                revision,
            );
            match (typed, framed) {
                (Ok(typed), Ok(framed)) => {
                    assert_eq!(typed.params(), framed.params(), "{params}");
                    assert_eq!(typed.rewritten(), framed.rewritten(), "{params}");
                    assert_eq!(typed.id, None);
                }
                (Err(typed), Err(framed)) => assert_eq!(typed, framed, "{params}"),
                (typed, framed) => panic!("{params}: {typed:?} but framed {framed:?}"),
            }
        }
    }
    let Value::Object(params) = json!({"messages": [], "maxTokens": 5, "id": 1, "method": "x"})
    else {
        unreachable!()
    };
    let request = validate_params_for(params.clone(), ProtocolRevision::default()).expect("valid");
    assert_eq!(request.params(), &params);
    assert!(
        validate_sampling(Value::Object(params)).is_err(),
        "sniffed as an envelope"
    );
}

#[test]
fn string_ids_and_integral_max_tokens_forms() {
    let text = r#"{"jsonrpc":"2.0","id":"abc","method":"sampling/createMessage","params":{"messages":[],"maxTokens":1e2}}"#;
    let request = validate_sampling(parse_strict(text.as_bytes()).expect("parses")).expect("ok");
    assert_eq!(request.id, Some(json!("abc")));
    assert_eq!(request.max_tokens(), 100);
}

#[test]
fn duplicate_keys_are_invalid_requests() {
    let text = request_with(
        r#"{"messages":[{"role":"user","role":"assistant","content":{"type":"text","text":"x"}}],"maxTokens":1}"#,
    );
    let error = refuse(&text);
    assert_eq!(error.code(), INVALID_REQUEST);
    assert_eq!(
        error.to_string(),
        r#"duplicate key "role" at $.params.messages[0]"#
    );
}

#[test]
fn duplicate_keys_at_the_top_level() {
    let error = refuse(r#"{"jsonrpc":"2.0","jsonrpc":"2.0","id":1}"#);
    assert_eq!(error.code(), INVALID_REQUEST);
    assert_eq!(error.to_string(), r#"duplicate key "jsonrpc" at $"#);
}

#[test]
fn keys_equal_after_nfc_are_duplicates() {
    // Precomposed first, then decomposed (as an escape).
    let error = refuse(r#"{"messages":[],"maxTokens":1,"_meta":{"é":1,"e\u0301":2}}"#);
    assert_eq!(error.code(), INVALID_REQUEST);
    assert_eq!(
        error.to_string(),
        r#"duplicate key "e\u0301" at $._meta: equal after Unicode NFC normalisation to the earlier key "\u00e9""#
    );
    // Decomposed first, then precomposed (literally).
    let error = refuse("{\"_meta\":{\"e\u{301}\":1,\"\u{e9}\":2}}");
    assert!(matches!(
        &error,
        RequestError::DuplicateKey { key, earlier, .. } if key == "\u{e9}" && earlier == "e\u{301}"
    ));
    // Two spellings that both need NFC, and a singleton (KELVIN SIGN is K).
    assert!(matches!(
        refuse("{\"x\":{\"e\u{301}\":1,\"e\\u0301\":2}}"),
        RequestError::DuplicateKey { .. }
    ));
    assert!(matches!(
        refuse(r#"{"K":1,"\u212a":2}"#),
        RequestError::DuplicateKey { .. }
    ));
}

#[test]
fn paths_quote_unusual_keys() {
    let error = refuse(r#"{"a b":[{"x":1,"x":2}]}"#);
    assert_eq!(error.to_string(), r#"duplicate key "x" at $["a b"][0]"#);
}

#[test]
fn lone_surrogates_are_parse_errors() {
    for text in [
        r#"{"messages":[],"maxTokens":1,"systemPrompt":"\ud800"}"#,
        r#"{"systemPrompt":"\ud800x"}"#,
        r#"{"systemPrompt":"\udc00"}"#,
        r#"{"systemPrompt":"\ud800\u0041"}"#,
        r#"{"\ud83d":1}"#,
    ] {
        let error = refuse(text);
        assert_eq!(error.code(), PARSE_ERROR, "{text}");
        assert!(
            matches!(error, RequestError::LoneSurrogate { .. }),
            "{text}: {error}"
        );
    }
    // A proper pair is fine.
    assert!(parse_strict(br#"{"s":"\ud83d\ude00"}"#).is_ok());
}

#[test]
fn invalid_utf8_and_invalid_json_are_parse_errors() {
    let error = parse_strict(b"{\"s\":\"\xff\"}").expect_err("invalid UTF-8");
    assert_eq!(error.code(), PARSE_ERROR);
    assert_eq!(error, RequestError::InvalidUtf8 { offset: 6 });
    for text in [
        "",
        "{",
        r#"{"a":1,}"#,
        r#"{"a":1} x"#,
        "nul",
        r#"{"a":01}"#,
        "1e999",
    ] {
        let error = parse_strict(text.as_bytes()).expect_err(text);
        assert_eq!(error.code(), PARSE_ERROR, "{text}: {error}");
    }
}

#[test]
fn ten_thousand_deep_nesting_is_a_clean_error() {
    for (open, close) in [("[", "]"), (r#"{"a":"#, "}")] {
        let text = format!("{}1{}", open.repeat(10_000), close.repeat(10_000));
        let error = parse_strict(text.as_bytes()).expect_err("too deep");
        assert_eq!(error.code(), PARSE_ERROR);
        assert!(
            error
                .to_string()
                .starts_with("nesting deeper than 64 levels at $"),
            "{error}"
        );
    }
    // Only an opening run, never closed.
    let error = parse_strict("[".repeat(10_000).as_bytes()).expect_err("too deep");
    assert!(matches!(error, RequestError::TooDeep { .. }), "{error}");
}

#[test]
fn depth_limit_is_exact_and_configurable() {
    let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    assert!(parse_strict(nested(64).as_bytes()).is_ok());
    assert!(parse_strict(nested(65).as_bytes()).is_err());
    let limits = Limits {
        max_depth: 3,
        ..Limits::default()
    };
    assert!(parse_strict_with(nested(3).as_bytes(), &limits).is_ok());
    let error = parse_strict_with(br#"{"a":[{"b":[]}]}"#, &limits).expect_err("depth 4");
    assert_eq!(
        error,
        RequestError::TooDeep {
            limit: 3,
            path: "$.a[0].b".into()
        }
    );
    // Beyond serde_json's own bound the error is still TooDeep.
    let limits = Limits {
        max_depth: 10_000,
        ..Limits::default()
    };
    let error = parse_strict_with(nested(500).as_bytes(), &limits).expect_err("capped");
    assert!(
        matches!(error, RequestError::TooDeep { limit: 127, .. }),
        "{error}"
    );
}

#[test]
fn twenty_mebibytes_are_too_large() {
    let mut text = String::from(r#"{"messages":[],"maxTokens":1,"systemPrompt":""#);
    text.push_str(&"a".repeat(20 * 1024 * 1024));
    text.push_str("\"}");
    let error = parse_strict(text.as_bytes()).expect_err("too large");
    assert_eq!(error.code(), INVALID_REQUEST);
    assert!(matches!(error, RequestError::TooLarge { limit, .. } if limit == 16 * 1024 * 1024));
    let small = Limits {
        max_bytes: 10,
        ..Limits::default()
    };
    assert!(parse_strict_with(b"[1,2,3,4,5]", &small).is_err());
    assert!(parse_strict_with(b"[1,2,3,4]", &small).is_ok());
}

#[test]
fn non_object_params_are_invalid_params() {
    for params in ["[]", "\"x\"", "null", "1"] {
        let error = refuse(&request_with(params));
        assert_eq!(error.code(), INVALID_PARAMS, "{params}");
        assert!(
            error
                .to_string()
                .starts_with("$.params must be an object, got "),
            "{error}"
        );
    }
    let error = refuse(r#"{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage"}"#);
    assert_eq!(error.code(), INVALID_PARAMS);
    assert_eq!(
        error.to_string(),
        "$.params is missing: it must be an object"
    );
}

#[test]
fn missing_or_ill_typed_max_tokens_and_messages() {
    let cases = [
        (
            r#"{"messages":[]}"#,
            "$.params.maxTokens is missing: it must be a positive integer",
        ),
        (
            r#"{"messages":[],"maxTokens":-1}"#,
            "$.params.maxTokens must be a positive integer, got -1",
        ),
        // MCP's schema says `integer`; 0 asks for no completion, and a
        // client that reads it as unset runs one no token budget counts
        // (`docs/spec/evaluation.md`, "Step 1: Validation").
        (
            r#"{"messages":[],"maxTokens":0}"#,
            "$.params.maxTokens must be a positive integer, got 0",
        ),
        (
            r#"{"messages":[],"maxTokens":-0}"#,
            "$.params.maxTokens must be a positive integer, got -0",
        ),
        (
            r#"{"messages":[],"maxTokens":0e5}"#,
            "$.params.maxTokens must be a positive integer, got 0",
        ),
        (
            r#"{"messages":[],"maxTokens":1.5}"#,
            "$.params.maxTokens must be a positive integer, got 1.5",
        ),
        (
            r#"{"messages":[],"maxTokens":"10"}"#,
            r#"$.params.maxTokens must be a positive integer, got "10""#,
        ),
        (
            r#"{"maxTokens":10}"#,
            "$.params.messages is missing: it must be an array of message objects",
        ),
        (
            r#"{"messages":{},"maxTokens":10}"#,
            "$.params.messages must be an array of message objects, got an object",
        ),
    ];
    for (params, message) in cases {
        let error = refuse(&request_with(params));
        assert_eq!(error.code(), INVALID_PARAMS, "{params}");
        assert_eq!(error.to_string(), message);
    }
    // Bare params name their path from the root.
    let error = refuse(r#"{"messages":[]}"#);
    assert_eq!(
        error.to_string(),
        "$.maxTokens is missing: it must be a positive integer"
    );
}

#[test]
fn envelope_errors_are_invalid_requests() {
    let cases = [
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#,
            r#"not a sampling request: method is "tools/call", expected "sampling/createMessage""#,
        ),
        (
            r#"{"jsonrpc":"1.0","id":1,"method":"sampling/createMessage","params":{}}"#,
            r#"$.jsonrpc must be "2.0", got "1.0""#,
        ),
        (
            r#"{"id":1,"method":"sampling/createMessage","params":{}}"#,
            r#"$.jsonrpc is missing: it must be "2.0""#,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"params":{}}"#,
            "$.method is missing: it must be a string",
        ),
        (
            r#"{"jsonrpc":"2.0","method":"sampling/createMessage","params":{}}"#,
            "$.id is missing: it must be a string or a number (a sampling request needs a response)",
        ),
        (
            r#"{"jsonrpc":"2.0","id":null,"method":"sampling/createMessage","params":{}}"#,
            "$.id must be a string or a number (a sampling request needs a response), got null",
        ),
        ("[]", "a request must be a JSON object, got an array"),
        ("42", "a request must be a JSON object, got 42"),
    ];
    for (text, message) in cases {
        let error = refuse(text);
        assert_eq!(error.code(), INVALID_REQUEST, "{text}");
        assert_eq!(error.to_string(), message);
    }
}

#[test]
fn the_id_survives_for_an_invalid_params_frame() {
    let value = parse_strict(request_with("[]").as_bytes()).expect("parses");
    let id = envelope_id(&value).cloned();
    assert_eq!(id, Some(json!(1)));
    assert_eq!(
        validate_sampling(value).expect_err("bad params").code(),
        INVALID_PARAMS
    );
    assert_eq!(envelope_id(&json!({"id": null})), None);
}

#[test]
fn parsed_values_keep_their_text() {
    let value =
        parse_strict("{\"k\":\"e\u{301}\",\"n\":[1,-2,3.5,18446744073709551615]}".as_bytes())
            .expect("parses");
    // Parsing never normalises: identity does, so the stored request is what was sent.
    assert_eq!(value["k"], json!("e\u{301}"));
    assert_eq!(value["n"], json!([1, -2, 3.5, 18446744073709551615u64]));
}

proptest! {
    #![proptest_config(config(300))]

    /// No input makes the parser or the validator panic.
    #[test]
    fn never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(value) = parse_strict(&bytes) {
            let _ = validate_sampling(value);
        }
    }

    /// Nor on JSON-ish text built from the characters that matter.
    #[test]
    fn never_panics_on_jsonish_text(
        pieces in proptest::collection::vec(
            prop::sample::select(vec![
                "{", "}", "[", "]", ",", ":", "\"", "\\u", "d800", "dc00", "\\", "e\u{301}",
                "\u{e9}", "1", "-", ".", "e", "null", "\"jsonrpc\"", "\"2.0\"", "\"params\"",
                "\"messages\"", "\"maxTokens\"", "\"id\"", " ",
            ]),
            0..60,
        )
    ) {
        let text: String = pieces.concat();
        if let Ok(value) = parse_strict(text.as_bytes()) {
            let _ = validate_sampling(value);
        }
    }

    /// Whatever serde_json accepts without duplicate keys, we accept identically.
    #[test]
    fn agrees_with_serde_json_on_plain_values(value in plain_value()) {
        let text = serde_json::to_string(&value).expect("serialise");
        prop_assert_eq!(parse_strict(text.as_bytes()).expect("parses"), value);
    }
}

fn plain_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        "[a-z]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z]{1,4}", inner, 0..5)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

// ---------------------------------------------------------------- includeContext

/// What the MCP schema allows for `includeContext`.
const SCOPES: [&str; 3] = ["none", "thisServer", "allServers"];

fn with_context(scope: &Value) -> String {
    request_with(&format!(
        r#"{{"messages":[],"maxTokens":1,"includeContext":{scope}}}"#
    ))
}

#[test]
fn unknown_include_context_is_invalid_params() {
    for scope in [
        json!("AllServers"),
        json!("ThisServer"),
        json!("everything"),
        json!(""),
        json!("none "),
        json!(7),
        json!(null),
        json!(true),
        json!(["allServers"]),
        json!({"scope": "none"}),
    ] {
        let error = refuse(&with_context(&scope));
        assert_eq!(error.code(), INVALID_PARAMS, "{scope}");
        assert!(
            error.to_string().starts_with(
                r#"$.params.includeContext must be one of "none", "thisServer", "allServers", got "#
            ),
            "{scope}: {error}"
        );
    }
    for scope in SCOPES {
        let request = validate_sampling(
            parse_strict(with_context(&json!(scope)).as_bytes()).expect("parses"),
        )
        .expect("a schema value is valid");
        assert_eq!(request.params()["includeContext"], json!(scope));
    }
}

/// Any JSON value: what a server could put in `includeContext`.
fn any_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        // Near misses of the schema's values.
        prop::sample::select(SCOPES.to_vec()).prop_flat_map(|scope| {
            (Just(scope), 0usize..4).prop_map(|(scope, how)| {
                Value::String(match how {
                    0 => scope.to_uppercase(),
                    1 => format!("{scope} "),
                    2 => scope.replace('S', "s"),
                    _ => format!("{}{}", &scope[..1].to_uppercase(), &scope[1..]),
                })
            })
        }),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z]{1,3}", inner, 0..3)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(config(500))]

    /// Every `includeContext` that is not one of the schema's three values
    /// (any other string, any other JSON value) is invalid params, in a
    /// whole request or bare params: never read as some scope.
    #[test]
    fn only_the_schemas_scopes_are_accepted(scope in any_value(), bare in any::<bool>()) {
        let params = format!(r#"{{"messages":[],"maxTokens":1,"includeContext":{scope}}}"#);
        let text = if bare { params } else { request_with(&params) };
        let outcome = validate_sampling(parse_strict(text.as_bytes()).expect("valid JSON"));
        let known = scope.as_str().is_some_and(|s| SCOPES.contains(&s));
        match outcome {
            Ok(request) => {
                prop_assert!(known, "{} was accepted", scope);
                prop_assert_eq!(&request.params()["includeContext"], &scope);
            }
            Err(error) => {
                prop_assert!(!known, "{} was refused: {}", scope, error);
                prop_assert_eq!(error.code(), INVALID_PARAMS);
                prop_assert!(error.to_string().contains(".includeContext must be one of"), "{}", error);
            }
        }
    }
}

// ---------------------------------------------------------------- messages

#[test]
fn a_missing_member_is_called_missing() {
    let cases = [
        (
            r#"{"messages":[]}"#.to_owned(),
            "$.maxTokens is missing: it must be a positive integer",
        ),
        (
            request_with(r#"{"maxTokens":1}"#),
            "$.params.messages is missing: it must be an array of message objects",
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage"}"#.to_owned(),
            "$.params is missing: it must be an object",
        ),
        (
            r#"{"id":1,"method":"sampling/createMessage","params":{}}"#.to_owned(),
            r#"$.jsonrpc is missing: it must be "2.0""#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"sampling/createMessage","params":{}}"#.to_owned(),
            "$.id is missing: it must be a string or a number (a sampling request needs a response)",
        ),
    ];
    for (text, message) in cases {
        let error = refuse(&text);
        assert_eq!(error.to_string(), message, "{text}");
        assert!(!error.to_string().contains("nothing"));
    }
}

#[test]
fn big_integers_are_printed_exactly() {
    for (written, shown) in [
        ("18446744073709551616", "18446744073709551616"),
        ("-18446744073709551616", "-18446744073709551616"),
        ("1e20", "100000000000000000000"),
        ("-1", "-1"),
        ("-9223372036854775808", "-9223372036854775808"),
        ("1.5", "1.5"),
    ] {
        let error = refuse(&request_with(&format!(
            r#"{{"messages":[],"maxTokens":{written}}}"#
        )));
        assert_eq!(
            error.to_string(),
            format!("$.params.maxTokens must be a positive integer, got {shown}"),
            "{written}"
        );
    }
    let error = refuse("18446744073709551616");
    assert_eq!(
        error.to_string(),
        "a request must be a JSON object, got 18446744073709551616"
    );
}

#[test]
fn an_oversize_request_is_an_invalid_request_not_a_parse_error() {
    let small = Limits {
        max_bytes: 10,
        ..Limits::default()
    };
    let error = parse_strict_with(b"[1,2,3,4,5]", &small).expect_err("too large");
    assert_eq!(error.code(), INVALID_REQUEST);
    assert_eq!(
        error.to_string(),
        "request is 11 bytes, larger than the limit of 10 bytes"
    );
}

#[test]
fn integral_max_tokens_are_handed_on_as_integers() {
    for (written, integer) in [
        ("9e3", 9000u64),
        ("9000.0", 9000),
        ("1.0", 1),
        ("1e0", 1),
        ("1E2", 100),
        ("9007199254740992.0", 9_007_199_254_740_992),
    ] {
        let text = request_with(&format!(r#"{{"messages":[],"maxTokens":{written}}}"#));
        let request = validate_sampling(parse_strict(text.as_bytes()).expect("parses"))
            .expect("an integral maxTokens is valid");
        assert_eq!(request.max_tokens(), integer, "{written}");
        // Written back out (as for forwarding), it is an integer.
        assert_eq!(
            serde_json::to_string(&request.params()["maxTokens"]).expect("serialise"),
            integer.to_string(),
            "{written}"
        );
        assert!(request.rewritten(), "{written}: the bytes no longer say it");
    }
    let plain = request_with(r#"{"messages":[],"maxTokens":9000}"#);
    let request = validate_sampling(parse_strict(plain.as_bytes()).expect("parses"))
        .expect("a plain integer is valid");
    assert!(!request.rewritten(), "a plain integer goes on as its bytes");
}

// ---------------------------------------------------------------- keys after NFC

/// Pieces of keys: ASCII, precomposed and decomposed letters, combining
/// marks in and out of canonical order, Hangul (composed and as jamo), and
/// singletons whose NFC is another character (KELVIN SIGN, OHM SIGN,
/// ANGSTROM SIGN).
const KEY_PIECES: &[&str] = &[
    "a",
    "e",
    "K",
    "id",
    "\u{e9}",
    "e\u{301}",
    "\u{301}",
    "\u{323}",
    "\u{323}\u{302}",
    "\u{302}\u{323}",
    "\u{1ec7}",
    "\u{ac00}",
    "\u{1100}\u{1161}",
    "\u{212a}",
    "\u{2126}",
    "\u{3a9}",
    "\u{212b}",
    "\u{c5}",
    "A\u{30a}",
    "\u{1f600}",
];

fn key_text() -> impl Strategy<Value = String> {
    proptest::collection::vec(prop::sample::select(KEY_PIECES), 1..5).prop_map(|p| p.concat())
}

/// A spelling of `key` that is equal to it after NFC: as given, NFC, NFD,
/// or with every character written as a `\u` escape.
fn respell(key: &str, how: u8) -> String {
    use unicode_normalization::UnicodeNormalization;
    let text: String = match how % 3 {
        0 => key.to_owned(),
        1 => key.nfc().collect(),
        _ => key.nfd().collect(),
    };
    if how >= 3 {
        text.encode_utf16().map(|u| format!("\\u{u:04x}")).collect()
    } else {
        serde_json::to_string(&text).expect("a string")[1..]
            .trim_end_matches('"')
            .to_owned()
    }
}

fn object_of(keys: &[String]) -> String {
    let members: Vec<String> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| format!("\"{key}\":{i}"))
        .collect();
    format!("{{{}}}", members.join(","))
}

proptest! {
    #![proptest_config(config(300))]

    /// Two keys equal after NFC, in whatever spellings and wherever among
    /// other keys, are always refused as duplicates.
    #[test]
    fn keys_equal_after_nfc_are_always_duplicates(
        key in key_text(),
        first in 0u8..6,
        second in 0u8..6,
        others in proptest::collection::vec("[a-z]{1,6}", 0..6),
        at in any::<prop::sample::Index>(),
        nested in any::<bool>(),
    ) {
        use unicode_normalization::UnicodeNormalization;
        let normal: String = key.nfc().collect();
        let mut keys: Vec<String> = others
            .into_iter()
            .filter(|k| *k != normal)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let position = at.index(keys.len() + 1);
        keys.insert(position, respell(&key, first));
        keys.push(respell(&key, second));
        let object = object_of(&keys);
        let text = if nested { format!(r#"{{"a":[{object}]}}"#) } else { object };
        let error = parse_strict(text.as_bytes()).expect_err("a duplicate");
        prop_assert!(matches!(error, RequestError::DuplicateKey { .. }), "{}: {}", text, error);
        prop_assert_eq!(error.code(), INVALID_REQUEST);
    }

    /// Keys that differ after NFC are never refused as duplicates, however
    /// each is spelt.
    #[test]
    fn keys_distinct_after_nfc_are_never_duplicates(
        keys in proptest::collection::vec((key_text(), 0u8..6), 0..12),
    ) {
        use unicode_normalization::UnicodeNormalization;
        let mut seen = std::collections::HashSet::new();
        let spelt: Vec<String> = keys
            .iter()
            .filter(|(key, _)| seen.insert(key.nfc().collect::<String>()))
            .map(|(key, how)| respell(key, *how))
            .collect();
        let text = object_of(&spelt);
        let value = parse_strict(text.as_bytes());
        prop_assert!(value.is_ok(), "{}: {:?}", text, value);
        prop_assert_eq!(value.expect("ok").as_object().map(|o| o.len()), Some(spelt.len()));
    }
}

#[test]
fn forty_thousand_decomposed_keys_are_decided_in_linear_time() {
    // A hang guard, not a speed target (those live in benches/request.rs):
    // quadratic, as it once was, this took 5-12 s in release and far
    // longer in this debug build; linear, it takes well under a second, so
    // the bound below never trips on a loaded machine and always on the
    // quadratic check.
    let members: Vec<String> = (0..40_000)
        .map(|i| format!("\"k{i}e\\u0301\":{i}"))
        .collect();
    let text = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{{"messages":[],"maxTokens":1,"_meta":{{{}}}}}}}"#,
        members.join(",")
    );
    let start = std::time::Instant::now();
    let value = parse_strict(text.as_bytes()).expect("distinct after NFC");
    validate_sampling(value).expect("valid");
    let elapsed = start.elapsed();
    assert!(
        elapsed < std::time::Duration::from_secs(20),
        "40,000 decomposed keys took {elapsed:?}"
    );
}

// ---------------------------------------------------------------- numbers as written

fn message_of(text: &str) -> String {
    match mcpolicy_runtime::request::parse_sampling(text.as_bytes()) {
        Ok(_) => panic!("{text}: must be refused"),
        Err(rejection) => rejection.error.to_string(),
    }
}

#[test]
fn numbers_are_quoted_as_written() {
    for (written, expected) in [
        (
            request_with(r#"{"messages":[],"maxTokens":18446744073709551617}"#),
            "$.params.maxTokens must be a positive integer, got 18446744073709551617",
        ),
        (
            request_with(r#"{"messages":[], "maxTokens" : -1.50e+3 }"#),
            "$.params.maxTokens must be a positive integer, got -1.50e+3",
        ),
        (
            request_with(r#"{"maxTokens":1,"messages":123456789012345678901234567890}"#),
            "$.params.messages must be an array of message objects, got 123456789012345678901234567890",
        ),
        (
            r#"{"messages":[],"maxTokens":-1E0}"#.to_owned(),
            "$.maxTokens must be a positive integer, got -1E0",
        ),
        (
            r#"{"jsonrpc":2.0,"id":1,"method":"sampling/createMessage","params":{}}"#.to_owned(),
            r#"$.jsonrpc must be "2.0", got 2.0"#,
        ),
        (
            " 100000000000000000000000001 ".to_owned(),
            "a request must be a JSON object, got 100000000000000000000000001",
        ),
    ] {
        assert_eq!(message_of(&written), expected, "{written}");
    }
    // A key spelt with an escape is found too; a long literal is cut.
    let long = format!("-{}", "9".repeat(100));
    assert_eq!(
        message_of(&request_with(&format!(
            r#"{{"messages":[],"maxT\u006fkens":{long}}}"#
        ))),
        format!(
            "$.params.maxTokens must be a positive integer, got {}…",
            &long[..64]
        )
    );
}

proptest! {
    #![proptest_config(config(300))]

    /// Every integer that is not a valid maxTokens (negative, or beyond
    /// u64) is printed in the message exactly as written.
    #[test]
    fn every_invalid_integer_is_printed_exactly(
        n in prop_oneof![
            (i128::MIN..0i128).prop_map(|n| n.to_string()),
            (u128::from(u64::MAX) + 1..=u128::MAX).prop_map(|n| n.to_string()),
        ],
        bare in any::<bool>(),
    ) {
        let params = format!(r#"{{"messages":[],"maxTokens":{n}}}"#);
        let (text, at) = if bare { (params, "$") } else { (request_with(&params), "$.params") };
        prop_assert_eq!(
            message_of(&text),
            format!("{at}.maxTokens must be a positive integer, got {n}")
        );
    }
}

// ---------------------------------------------------------------- field types

/// `docs/spec/evaluation.md` step 1: each field of the schema's type. Found by the differential
/// test: `"hints": "gpt-4o"` is no list the `models` trim could narrow, so
/// the request went on naming a model the policy does not allow.
#[test]
fn fields_of_the_wrong_type_are_invalid_params() {
    let base = json!({"messages": [], "maxTokens": 10});
    for (field, value, path) in [
        ("systemPrompt", json!(5), "$.params.systemPrompt"),
        ("systemPrompt", json!(null), "$.params.systemPrompt"),
        ("temperature", json!("hot"), "$.params.temperature"),
        (
            "stopSequences",
            json!(["a", 1]),
            "$.params.stopSequences[1]",
        ),
        ("metadata", json!([]), "$.params.metadata"),
        ("tools", json!({}), "$.params.tools"),
        ("tools", json!(["search"]), "$.params.tools[0]"),
        ("toolChoice", json!("auto"), "$.params.toolChoice"),
        ("_meta", json!(1), "$.params._meta"),
        (
            "modelPreferences",
            json!("gpt-4o"),
            "$.params.modelPreferences",
        ),
        (
            "modelPreferences",
            json!({"hints": "gpt-4o"}),
            "$.params.modelPreferences.hints",
        ),
        (
            "modelPreferences",
            json!({"hints": ["gpt-4o"]}),
            "$.params.modelPreferences.hints[0]",
        ),
        (
            "modelPreferences",
            json!({"hints": [{"name": "claude"}, {"name": 4}]}),
            "$.params.modelPreferences.hints[1].name",
        ),
        (
            "modelPreferences",
            json!({"costPriority": 1.5}),
            "$.params.modelPreferences.costPriority",
        ),
        (
            "messages",
            json!([{"role": "user", "content": {"type": "text", "text": "x"}}, "hi"]),
            "$.params.messages[1]",
        ),
        (
            "messages",
            json!([{"role": "system", "content": {"type": "text", "text": "x"}}]),
            "$.params.messages[0].role",
        ),
        ("messages", json!([{}]), "$.params.messages[0].role"),
        (
            "messages",
            json!([{"role": 7, "content": {"type": "text", "text": "x"}}]),
            "$.params.messages[0].role",
        ),
        (
            "messages",
            json!([{"role": "user", "content": {"type": "text"}}]),
            "$.params.messages[0].content.text",
        ),
        (
            "toolChoice",
            json!({"mode": "sometimes"}),
            "$.params.toolChoice.mode",
        ),
        (
            "tools",
            json!([{"name": "x"}]),
            "$.params.tools[0].inputSchema",
        ),
    ] {
        let mut params = base.clone();
        params[field] = value.clone();
        let error = refuse(&request_with(&params.to_string()));
        assert_eq!(error.code(), INVALID_PARAMS, "{field}: {value}");
        assert!(
            error.to_string().starts_with(&format!("{path} must be"))
                || error.to_string().starts_with(&format!("{path} is missing")),
            "{field}: {value}: {error}"
        );
    }
    let mut typed = base.clone();
    typed["systemPrompt"] = json!("be brief");
    typed["temperature"] = json!(0.2);
    typed["stopSequences"] = json!(["\n"]);
    typed["metadata"] = json!({});
    typed["tools"] = json!([{"name": "search", "inputSchema": {"type": "object"}}]);
    typed["toolChoice"] = json!({"mode": "auto"});
    typed["modelPreferences"] =
        json!({"hints": [{"name": "claude"}, {}], "costPriority": 0, "speedPriority": 1});
    validate_sampling(parse_strict(request_with(&typed.to_string()).as_bytes()).expect("parses"))
        .expect("every field of its type");
}

/// `docs/spec/evaluation.md` step 1: messages and `toolChoice` follow the
/// schema's enumerations and required members (these were let through:
/// the differential `runtime/tests/request_schema.rs` holds the rule).
#[test]
fn messages_and_tool_choice_follow_the_schema() {
    for (field, value) in [
        (
            "messages",
            json!([{"role": "system", "content": {"type": "text", "text": "x"}}]),
        ),
        ("messages", json!([{}])),
        (
            "messages",
            json!([{"role": 7, "content": {"type": "text", "text": "x"}}]),
        ),
        ("toolChoice", json!({"mode": "sometimes"})),
        ("maxTokens", json!(0)),
    ] {
        let mut params = json!({"messages": [], "maxTokens": 10});
        params[field] = value.clone();
        let value_text = request_with(&params.to_string());
        let outcome = validate_sampling(parse_strict(value_text.as_bytes()).expect("parses"));
        assert!(
            matches!(&outcome, Err(error) if error.code() == INVALID_PARAMS),
            "{field}: {value} must be refused as invalid params: {outcome:?}"
        );
    }
}
