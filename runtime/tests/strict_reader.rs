//! The strict reader's fast path against serde_json's (`parse_strict_with`
//! and `parse_strict_tree` against `parse_strict_serde`, `runtime/src/request/fast.rs`): on every
//! input both accept the same documents, read them as the same value, and
//! refuse the rest with the same error. serde_json is the reader we did not
//! write; the fast path may only decide sooner.
//!
//! The documents are written as text, not built as values, so that they
//! can hold what no `Value` can: a key twice, two keys equal after NFC,
//! escapes of every kind, lone surrogates, numbers spelt every way JSON
//! allows and some ways it does not. Each is then also cut and mutated
//! byte by byte.

use mcpolicy_runtime::request::{Limits, parse_strict_serde, parse_strict_tree, parse_strict_with};
use proptest::prelude::*;
use serde_json::Value;

/// A document as written.
#[derive(Debug, Clone)]
enum Doc {
    Literal(&'static str),
    Number(String),
    Text(String),
    Array(Vec<Doc>),
    Object(Vec<(String, Doc)>),
}

impl Doc {
    fn write(&self, space: &[&str], out: &mut String, turn: &mut usize) {
        fn pad(space: &[&str], out: &mut String, turn: &mut usize) {
            *turn += 1;
            out.push_str(space[*turn % space.len()]);
        }
        match self {
            Doc::Literal(word) => out.push_str(word),
            Doc::Number(literal) | Doc::Text(literal) => out.push_str(literal),
            Doc::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    pad(space, out, turn);
                    item.write(space, out, turn);
                    pad(space, out, turn);
                }
                out.push(']');
            }
            Doc::Object(members) => {
                out.push('{');
                for (i, (key, item)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    pad(space, out, turn);
                    out.push_str(key);
                    pad(space, out, turn);
                    out.push(':');
                    pad(space, out, turn);
                    item.write(space, out, turn);
                }
                pad(space, out, turn);
                out.push('}');
            }
        }
    }
}

/// A string literal, quotes included: plain characters, characters whose
/// NFC forms differ or coincide (`é` and `e`+U+0301, Å and U+212B, K and
/// U+212A), escapes of every letter, `\u` escapes of BMP characters, of
/// surrogate pairs and of lone halves, raw control characters, and long
/// runs (past the 32-byte chunks the scan reads).
fn string_literal() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => "[a-z ]{0,6}".prop_map(|s| s),
        1 => "[a-z]{30,70}".prop_map(|s| s),
        2 => prop::sample::select(vec![
            "é", "e\u{301}", "\u{c5}", "\u{212b}", "K", "\u{212a}", "—", "\u{1F600}", "\u{ffff}",
            "\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t", "\\u0041", "\\u00e9",
            "\\u00E9", "\\u0000", "\\u001f", "\\ud83d\\ude00", "\\uD83D\\uDE00", "\\ud83d",
            "\\ude00", "\\ud83d\\u0041", "\\ud83dx", "\\u12", "\\x", "\\", "\u{1}", "\u{1f}",
            "\t", "\u{7f}", "\\u2028",
        ])
        .prop_map(str::to_owned),
    ];
    prop::collection::vec(piece, 0..6).prop_map(|pieces| format!("\"{}\"", pieces.concat()))
}

/// Keys chosen to collide: as written, after NFC, or not at all.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "\"a\"", "\"b\"", "\"id\"", "\"\"", "\"\u{e9}\"", "\"e\u{301}\"", "\"\\u00e9\"",
            "\"e\\u0301\"", "\"\u{c5}\"", "\"\u{212b}\"", "\"K\"", "\"\u{212a}\"", "\"\\u212a\"",
            "\"\u{1e69}\"", "\"s\u{323}\u{307}\"", "\"s\u{307}\u{323}\"",
        ])
        .prop_map(str::to_owned),
        1 => string_literal(),
    ]
}

/// Number literals: integers at the edges of `u64` and `i64`, `-0`,
/// fractions and exponents, doubles at the edge of range, and spellings
/// JSON refuses.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => any::<i64>().prop_map(|n| n.to_string()),
        1 => any::<u64>().prop_map(|n| n.to_string()),
        1 => any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| format!("{f:e}")),
        1 => any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| f.to_string()),
        2 => prop::sample::select(vec![
            "0", "-0", "0.0", "-0.0", "1e2", "1E+2", "1e-2", "-1.5e-300", "18446744073709551615",
            "18446744073709551616", "-9223372036854775808", "-9223372036854775809",
            "123456789012345678901234567890", "1e308", "1.8e308", "1e400", "-1e400", "4.9e-324",
            "2e-324", "1e-400", "0e99999999999999999999", "1e99999999999999999999",
            "1e-99999999999999999999", "9007199254740993", "0.1", "01", "-", "1.", ".5",
            "1e", "1e+", "+1", "-01", "1.5E3", "00",
        ])
        .prop_map(str::to_owned),
    ]
}

fn doc() -> impl Strategy<Value = Doc> {
    let leaf = prop_oneof![
        prop::sample::select(vec!["null", "true", "false", "nul", "tru", "True"])
            .prop_map(Doc::Literal),
        number().prop_map(Doc::Number),
        string_literal().prop_map(Doc::Text),
    ];
    leaf.prop_recursive(6, 48, 6, |inner| {
        prop_oneof![
            3 => prop::collection::vec(inner.clone(), 0..6).prop_map(Doc::Array),
            3 => prop::collection::vec((key(), inner.clone()), 0..6).prop_map(Doc::Object),
            // Wide enough that the reader keeps the keys hashed, with
            // keys that may clash only after that.
            1 => (14usize..24, prop::collection::vec((key(), inner), 2..4)).prop_map(
                |(wide, tail)| {
                    let mut members: Vec<(String, Doc)> = (0..wide)
                        .map(|i| (format!("\"w{i}\""), Doc::Literal("null")))
                        .collect();
                    members.extend(tail);
                    Doc::Object(members)
                }
            ),
        ]
    })
}

/// White space JSON allows, and characters it does not.
fn spacing() -> impl Strategy<Value = Vec<&'static str>> {
    prop::collection::vec(
        prop_oneof![
            8 => Just(""),
            4 => prop::sample::select(vec![" ", "\n", "\t", "\r", "  \r\n"]),
            1 => prop::sample::select(vec!["\u{b}", "\u{c}", "\u{a0}", "x", "/**/"]),
        ],
        1..5,
    )
}

/// A byte edit: what a fuzzer or a hostile server would try.
#[derive(Debug, Clone)]
enum Edit {
    Cut(usize),
    Remove(usize),
    Insert(usize, u8),
    Replace(usize, u8),
}

fn edit() -> impl Strategy<Value = Edit> {
    let byte = prop::sample::select(
        b"\"\\{}[],:0123456789-+.eEu \t\nabfnrtDd\x00\x01\x7f\xc3\xa9\xe2\x80".to_vec(),
    );
    prop_oneof![
        any::<usize>().prop_map(Edit::Cut),
        any::<usize>().prop_map(Edit::Remove),
        (any::<usize>(), byte.clone()).prop_map(|(at, b)| Edit::Insert(at, b)),
        (any::<usize>(), byte).prop_map(|(at, b)| Edit::Replace(at, b)),
    ]
}

fn apply(bytes: &mut Vec<u8>, edit: &Edit) {
    let n = bytes.len();
    match *edit {
        Edit::Cut(at) => bytes.truncate(at % (n + 1)),
        Edit::Remove(at) if n > 0 => {
            bytes.remove(at % n);
        }
        Edit::Insert(at, b) => bytes.insert(at % (n + 1), b),
        Edit::Replace(at, b) if n > 0 => bytes[at % n] = b,
        _ => {}
    }
}

/// The two readers agree on `bytes` under `limits`: the same error, or
/// the same value, doubles compared by their bits (`-0.0 == 0.0` would
/// hide a sign).
fn agree(bytes: &[u8], limits: &Limits) -> Result<(), TestCaseError> {
    let fast = parse_strict_with(bytes, limits);
    let serde = parse_strict_serde(bytes, limits);
    prop_assert_eq!(&fast, &serde, "input {:?}", String::from_utf8_lossy(bytes));
    if let (Ok(fast), Ok(serde)) = (&fast, &serde) {
        prop_assert!(same_bits(fast, serde), "{fast} vs {serde}");
    }
    // The borrowed tree a decision is made from accepts exactly what
    // serde_json does, and holds the same value.
    let tree = parse_strict_tree(bytes, limits);
    prop_assert_eq!(
        tree.as_ref(),
        serde.as_ref().ok(),
        "input {:?}",
        String::from_utf8_lossy(bytes)
    );
    if let (Some(tree), Ok(serde)) = (&tree, &serde) {
        prop_assert!(same_bits(tree, serde), "{tree} vs {serde}");
    }
    Ok(())
}

fn same_bits(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x == y && x.as_f64().map(f64::to_bits) == y.as_f64().map(f64::to_bits)
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_bits(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((ka, a), (kb, b))| ka == kb && same_bits(a, b))
        }
        _ => a == b,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn the_fast_path_reads_what_serde_json_reads(doc in doc(), space in spacing(), depth in 1usize..8) {
        let mut text = String::new();
        doc.write(&space, &mut text, &mut 0);
        let limits = Limits { max_bytes: 1 << 20, max_depth: depth };
        agree(text.as_bytes(), &limits)?;
        agree(text.as_bytes(), &Limits::default())?;
    }

    #[test]
    fn the_fast_path_refuses_what_serde_json_refuses(
        doc in doc(),
        space in spacing(),
        edits in prop::collection::vec(edit(), 1..4),
    ) {
        let mut text = String::new();
        doc.write(&space, &mut text, &mut 0);
        let mut bytes = text.into_bytes();
        for edit in &edits {
            apply(&mut bytes, edit);
            agree(&bytes, &Limits::default())?;
        }
    }
}

/// Nesting at and around every limit, serde_json's own 127 included.
#[test]
fn the_fast_path_nests_as_deep_as_serde_json() {
    for depth in [1, 2, 63, 64, 65, 126, 127, 128, 200] {
        for max_depth in [1, 3, 64, 127, 128, 10_000] {
            let limits = Limits {
                max_bytes: 1 << 20,
                max_depth,
            };
            for (open, close) in [("[", "]"), ("{\"a\":", "}")] {
                let text = format!("{}0{}", open.repeat(depth), close.repeat(depth));
                let fast = parse_strict_with(text.as_bytes(), &limits);
                let serde = parse_strict_serde(text.as_bytes(), &limits);
                assert_eq!(fast, serde, "depth {depth}, limit {max_depth}, {open}");
                let tree = parse_strict_tree(text.as_bytes(), &limits);
                assert_eq!(
                    tree.as_ref(),
                    serde.as_ref().ok(),
                    "the tree at depth {depth}, limit {max_depth}"
                );
            }
        }
    }
}
