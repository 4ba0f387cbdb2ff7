//! Canonical JSON and request identity: RFC 8785 examples, equivalence
//! groups, the frozen vectors, a Python cross-check and a differential
//! property test against `serde_json_canonicalizer`.
//!
//! Data lives in `tests/cases/identity/` at the repository root.

use std::path::PathBuf;
use std::process::Command;

use mcpolicy_runtime::identity::{
    RequestIdentity, canonical_bytes, canonical_len, request_identity, write_canonical,
};
use mcpolicy_runtime::request::{parse_strict, validate_sampling};
use proptest::prelude::*;
use serde_json::{Map, Number, Value, json};
use sha2::{Digest, Sha256};
use unicode_normalization::UnicodeNormalization;

fn cases_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/cases/identity")
}

fn load(name: &str) -> Value {
    let path = cases_dir().join(name);
    let text = std::fs::read_to_string(&path).expect("case file readable");
    serde_json::from_str(&text).expect("case file is JSON")
}

fn canonical_text(value: &Value) -> String {
    String::from_utf8(canonical_bytes(value)).expect("canonical JSON is UTF-8")
}

fn str_list(value: &Value) -> Vec<String> {
    value
        .as_array()
        .expect("a list")
        .iter()
        .map(|v| v.as_str().expect("a string").to_owned())
        .collect()
}

/// Params from JSON text, through the same strict parser the runtime uses.
fn params_of(text: &str) -> Map<String, Value> {
    let value = parse_strict(text.as_bytes()).expect("case parses strictly");
    match value {
        Value::Object(map) => map,
        other => panic!("params must be an object, got {other}"),
    }
}

#[test]
fn rfc8785_numbers() {
    let cases = load("rfc8785.json");
    for case in cases["numbers"].as_array().expect("numbers") {
        let bits = u64::from_str_radix(case["bits"].as_str().expect("bits"), 16).expect("hex");
        let number = Number::from_f64(f64::from_bits(bits)).expect("finite");
        assert_eq!(
            canonical_text(&Value::Number(number)),
            case["expected"].as_str().expect("expected"),
            "bits {bits:016x}"
        );
    }
}

#[test]
fn rfc8785_texts() {
    let cases = load("rfc8785.json");
    for case in cases["texts"].as_array().expect("texts") {
        let input = case["input"].as_str().expect("input");
        let value = parse_strict(input.as_bytes()).expect("input parses");
        assert_eq!(
            canonical_text(&value),
            case["expected"].as_str().expect("expected"),
            "{}",
            case["name"]
        );
    }
}

#[test]
fn canonical_len_matches_bytes() {
    let value = json!({"b": "caf\u{65}\u{301}", "a": [1.5, "\n"]});
    assert_eq!(canonical_len(&value), canonical_bytes(&value).len() as u64);
}

#[test]
fn equivalence_groups() {
    let doc = load("equivalence.json");
    let fields = str_list(&doc["fields"]);
    let server = doc["server"].as_str().expect("server");
    for group in doc["groups"].as_array().expect("groups") {
        let members = str_list(&group["same"]);
        let first = request_identity(server, &params_of(&members[0]), &fields);
        for member in &members[1..] {
            assert_eq!(
                request_identity(server, &params_of(member), &fields),
                first,
                "group {}: {member}",
                group["name"]
            );
        }
    }
    let distinct = str_list(&doc["distinct"]["members"]);
    let identities: Vec<RequestIdentity> = distinct
        .iter()
        .map(|text| request_identity(server, &params_of(text), &fields))
        .collect();
    for (i, a) in identities.iter().enumerate() {
        for (j, b) in identities.iter().enumerate().skip(i + 1) {
            assert_ne!(a, b, "members {i} and {j} must differ");
        }
    }
    // The server is part of the identity, not of the digest.
    let other = request_identity("other", &params_of(&distinct[0]), &fields);
    assert_eq!(
        other.as_str().split_once(':').map(|(_, d)| d),
        identities[0].as_str().split_once(':').map(|(_, d)| d)
    );
}

#[test]
fn whole_request_and_bare_params_have_one_identity() {
    let fields = vec!["messages".to_owned(), "systemPrompt".to_owned()];
    let params =
        r#"{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":9}"#;
    let request = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{params}}}"#
    );
    let bare = validate_sampling(parse_strict(params.as_bytes()).expect("json")).expect("valid");
    let whole = validate_sampling(parse_strict(request.as_bytes()).expect("json")).expect("valid");
    assert_eq!(
        request_identity("s", bare.params(), &fields),
        request_identity("s", whole.params(), &fields)
    );
}

/// The Python sketch's payload, for the oracle: NFC every string, then JCS.
fn oracle_identity(server: &str, params: &Map<String, Value>, fields: &[String]) -> String {
    let payload: Map<String, Value> = fields
        .iter()
        .map(|f| {
            (
                f.nfc().collect(),
                params.get(f).cloned().unwrap_or(Value::Null),
            )
        })
        .collect();
    let payload = nfc_value(&Value::Object(payload)).expect("no keys collide after NFC");
    let bytes = serde_json_canonicalizer::to_vec(&payload).expect("oracle canonicalises");
    let digest = Sha256::digest(&bytes);
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("{server}:{hex}")
}

const FREEZE: &str = "MCPOLICY_FREEZE_NEW_VECTORS";

#[test]
fn frozen_vectors() {
    let path = cases_dir().join("vectors.json");
    let mut doc = load("vectors.json");
    let mut filled = 0;
    let vectors = doc["vectors"].as_array_mut().expect("vectors");
    assert!(vectors.len() >= 20);
    for vector in vectors.iter_mut() {
        let name = vector["name"].as_str().expect("name").to_owned();
        let server = vector["server"].as_str().expect("server").to_owned();
        let fields = str_list(&vector["fields"]);
        let params = vector["params"].as_object().expect("params object").clone();
        let actual = request_identity(&server, &params, &fields);
        assert_eq!(
            actual.as_str(),
            oracle_identity(&server, &params, &fields),
            "{name}: oracle disagrees"
        );
        match vector.get("identity").and_then(Value::as_str) {
            Some(frozen) => assert_eq!(actual.as_str(), frozen, "{name}: identity drifted"),
            None if std::env::var_os(FREEZE).is_some() => {
                vector["identity"] = Value::String(actual.into_string());
                filled += 1;
            }
            None => panic!("{name}: no frozen identity (computed {actual}); run with {FREEZE}=1"),
        }
    }
    if filled > 0 {
        let text = serde_json::to_string_pretty(&doc).expect("serialise") + "\n";
        std::fs::write(&path, text).expect("write vectors");
    }
}

#[test]
fn python_sketch_agrees() {
    let script = cases_dir().join("crosscheck.py");
    let vectors = cases_dir().join("vectors.json");
    // `MCPOLICY_PYTHON` (CI's virtual environment), else `python3`; the
    // sketch needs the standard library only.
    let python = std::env::var("MCPOLICY_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let output = match Command::new(&python).arg(&script).arg(&vectors).output() {
        Ok(output) => output,
        Err(error) => {
            // CI sets MCPOLICY_REQUIRE_PYTHON: there a missing interpreter
            // fails the check instead of skipping it.
            assert!(
                std::env::var_os("MCPOLICY_REQUIRE_PYTHON").is_none(),
                "cannot run {python} ({error}), and MCPOLICY_REQUIRE_PYTHON is set"
            );
            println!("SKIPPED python_sketch_agrees: cannot run {python} ({error})");
            return;
        }
    };
    assert!(
        output.status.success(),
        "crosscheck.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let doc = load("vectors.json");
    let vectors = doc["vectors"].as_array().expect("vectors");
    let mut checked = 0;
    for line in String::from_utf8(output.stdout).expect("UTF-8").lines() {
        let row: Value = serde_json::from_str(line).expect("a JSON line");
        let index = row["index"].as_u64().expect("index") as usize;
        let vector = &vectors[index];
        let fields = str_list(&vector["fields"]);
        let params = vector["params"].as_object().expect("params");
        let ours = request_identity(vector["server"].as_str().expect("server"), params, &fields);
        assert_eq!(
            row["identity"].as_str(),
            Some(ours.as_str()),
            "{}",
            row["name"]
        );
        assert_eq!(row["identity"], vector["identity"], "{}", row["name"]);
        checked += 1;
    }
    assert!(
        checked >= 12,
        "only {checked} vectors were eligible for the Python check"
    );
}

#[test]
fn table_digest_path_still_hashes_canonical_bytes() {
    let value = json!({"z": 1, "a": "e\u{301}"});
    let mut hasher = Sha256::new();
    write_canonical(&value, &mut hasher);
    assert_eq!(
        hasher.finalize().as_slice(),
        Sha256::digest(b"{\"a\":\"\xc3\xa9\",\"z\":1}").as_slice()
    );
}

#[test]
fn keys_equal_after_nfc_are_ordered_independently_of_map_order() {
    // Strict parsing refuses such objects, but a Value built in code can hold them.
    let mut a = Map::new();
    a.insert("e\u{301}".into(), json!(1));
    a.insert("\u{e9}".into(), json!(2));
    let mut b = Map::new();
    b.insert("\u{e9}".into(), json!(2));
    b.insert("e\u{301}".into(), json!(1));
    assert_eq!(
        canonical_bytes(&Value::Object(a)),
        canonical_bytes(&Value::Object(b))
    );
}

#[test]
fn very_deep_values_do_not_overflow_the_stack() {
    let mut value = json!("leaf");
    for _ in 0..100_000 {
        value = Value::Array(vec![value]);
    }
    assert_eq!(canonical_len(&value), 200_000 + 6);
    // Dropping such a value recursively would overflow: take it apart by hand.
    while let Value::Array(mut items) = value {
        value = items.pop().unwrap_or(Value::Null);
    }
}

// ---- differential property test ------------------------------------------

/// NFC every string, keys included; `None` if two keys of one object collide.
fn nfc_value(value: &Value) -> Option<Value> {
    Some(match value {
        Value::String(s) => Value::String(s.nfc().collect()),
        Value::Array(items) => Value::Array(items.iter().map(nfc_value).collect::<Option<_>>()?),
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, v) in map {
                if out.insert(k.nfc().collect(), nfc_value(v)?).is_some() {
                    return None;
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    })
}

/// Characters chosen to hit every branch: escapes, controls, Latin-1 (inert),
/// combining marks (NFC `Maybe`), singletons (NFC `No`), Hangul jamo, CJK,
/// private use, astral, and the UTF-16 ordering corner around U+E000.
fn interesting_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => proptest::char::range('a', 'e'),
        2 => proptest::char::range(' ', '~'),
        1 => prop::sample::select(vec!['"', '\\', '\n', '\t', '\u{8}', '\u{c}', '\r', '/']),
        1 => proptest::char::range('\u{0}', '\u{1f}'),
        1 => prop::sample::select(vec!['\u{7f}', '\u{80}', '\u{9f}', '\u{2028}', '\u{2029}']),
        2 => proptest::char::range('\u{c0}', '\u{17f}'),
        2 => proptest::char::range('\u{300}', '\u{36f}'),
        1 => prop::sample::select(vec![
            '\u{212b}', '\u{212a}', '\u{2126}', '\u{fb33}', '\u{37e}', '\u{340}', '\u{f900}',
            '\u{1e0b}', '\u{323}', '\u{1ea1}', '\u{3099}', '\u{304b}', '\u{e0}'
        ]),
        1 => proptest::char::range('\u{1100}', '\u{1175}'),
        1 => proptest::char::range('\u{11a8}', '\u{11c2}'),
        1 => proptest::char::range('\u{ac00}', '\u{ac1f}'),
        1 => proptest::char::range('\u{4e00}', '\u{4e0f}'),
        1 => prop::sample::select(vec!['\u{d7ff}', '\u{e000}', '\u{fffd}', '\u{ffff}']),
        1 => prop::sample::select(vec![
            '\u{10000}', '\u{1d15e}', '\u{1f600}', '\u{1f680}', '\u{10ffff}', '\u{2f800}'
        ]),
    ]
}

fn interesting_string() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::collection::vec(interesting_char(), 0..12)
            .prop_map(|chars| chars.into_iter().collect::<String>()),
        // Longer strings cross the eight-byte scanning words and the buffer.
        1 => (proptest::collection::vec(interesting_char(), 0..40), 0usize..200)
            .prop_map(|(chars, repeat)| chars.into_iter().collect::<String>().repeat(repeat)),
    ]
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1000i64..1000).prop_map(Value::from),
        // Integers around the 2^53 boundary.
        (-4i64..4).prop_map(|d| Value::from((1i64 << 53) + d)),
        (-4i64..4).prop_map(|d| Value::from(-(1i64 << 53) + d)),
        any::<u64>().prop_filter_map("finite", |bits| {
            Number::from_f64(f64::from_bits(bits)).map(Value::Number)
        }),
        (-1_000_000i64..1_000_000, 0u32..12).prop_filter_map("finite", |(m, e)| {
            Number::from_f64(m as f64 / 10f64.powi(e as i32)).map(Value::Number)
        }),
        // Exact ties between two shortest decimals (ECMAScript takes the even one).
        ((1u64 << 50)..(1u64 << 56), 1u32..4)
            .prop_map(|(m, shift)| { Value::from(m as f64 / f64::from(1u32 << shift)) }),
        (1u32..10, -330i32..310).prop_filter_map("finite", |(m, e)| {
            Number::from_f64(format!("{m}e{e}").parse::<f64>().ok()?).map(Value::Number)
        }),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        interesting_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((interesting_string(), inner), 0..6)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

/// Serialises `value` with keys in reverse order, random-ish whitespace and
/// every non-ASCII character of strings written as `\u` escapes.
fn reencode(value: &Value, out: &mut String) {
    match value {
        Value::Array(items) => {
            out.push_str("[ ");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(" ,\n");
                }
                reencode(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push_str("{\t");
            for (i, (k, v)) in map.iter().rev().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                escape_all(k, out);
                out.push_str(" : ");
                reencode(v, out);
            }
            out.push_str(" }");
        }
        Value::String(s) => escape_all(s, out),
        other => out.push_str(&other.to_string()),
    }
}

fn escape_all(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04X}"));
            }
        }
    }
    out.push('"');
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// Our canonical bytes equal `serde_json_canonicalizer`'s over the
    /// NFC-normalised value.
    #[test]
    fn matches_the_oracle_after_nfc(value in json_value()) {
        let normalised = nfc_value(&value);
        prop_assume!(normalised.is_some());
        let normalised = normalised.expect("checked");
        let oracle = serde_json_canonicalizer::to_vec(&normalised).expect("oracle");
        let ours = canonical_bytes(&value);
        prop_assert_eq!(
            String::from_utf8_lossy(&ours), String::from_utf8_lossy(&oracle)
        );
        // Canonicalising is idempotent and NFC first changes nothing.
        prop_assert_eq!(canonical_bytes(&normalised), ours.clone());
        let reparsed: Value = serde_json::from_slice(&ours).expect("canonical JSON parses");
        prop_assert_eq!(canonical_bytes(&reparsed), ours);
    }

    /// Key order, whitespace and escaping of the JSON text do not matter.
    #[test]
    fn encoding_does_not_matter(value in json_value()) {
        prop_assume!(nfc_value(&value).is_some());
        let mut text = String::new();
        reencode(&value, &mut text);
        let parsed = parse_strict(text.as_bytes());
        prop_assert!(parsed.is_ok(), "{:?} for {}", parsed, text);
        prop_assert_eq!(canonical_bytes(&parsed.expect("checked")), canonical_bytes(&value));
    }
}

/// `0.20465420099999998` is the shortest form of a double (what JavaScript
/// and Python print for it), so RFC 8785 writes it back unchanged. Without
/// its `float_roundtrip` feature serde_json reads it one ulp off, as
/// `0.204654201` (a different double; about 15 % of random 17-digit doubles
/// are misread), so distinct values would share an identity and one value
/// written two ways could get two.
///
/// This passes in test builds only because the dev-dependency
/// `serde_json_canonicalizer` turns `float_roundtrip` on; a normal build of
/// the runtime (or `mcpc`) does not have it until the workspace's
/// `serde_json` dependency enables it. That must happen before the first
/// release: afterwards it would change stored identities of such requests.
#[test]
fn seventeen_digit_floats_are_read_exactly() {
    let value = parse_strict(b"[0.20465420099999998]").expect("parses");
    assert_eq!(canonical_text(&value), "[0.20465420099999998]");
}
