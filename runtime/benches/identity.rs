//! Request identity against plain SHA-256 over the same canonical bytes.
//!
//! Target (`docs/performance.md`): identity of an already-parsed request ≤ 2× SHA-256 of
//! its canonical bytes at 4 KiB, ≤ 1.5× at 64 KiB, measured in the same run.
//! The `naive` rows are the obvious path (NFC every string into a new value,
//! `serde_json_canonicalizer`, then SHA-256) for comparison.
//!
//! Run: `cargo bench -p mcpolicy-runtime --bench identity`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group};
use mcpolicy_runtime::identity::{ByteCount, request_identity, write_identity_payload};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use unicode_normalization::UnicodeNormalization;

/// English chat text: mostly ASCII; now and then a quoted word, a curly
/// apostrophe, an accent, a dash or an emoji; a newline every line or so.
#[rustfmt::skip]
const ENGLISH: &[&str] = &[
    "the", "release", "notes", "for", "version", "two", "summarise", "changes", "since",
    "last", "tag", "and", "list", "every", "pull", "request", "that", "was", "merged", "into",
    "main", "with", "its", "author", "fixes", "error", "handling", "in", "parser", "tests",
    "docs", "of", "a", "commit", "review", "deploy", "please", "keep", "it", "short", "we",
    "need", "this", "by", "Friday", "thanks", "also", "mention", "breaking", "API", "users",
    "should", "upgrade", "\"config\"", "it’s", "café", "—", "🙂",
];

/// A stress mix: a quarter of the words carry an accent, a dash, an emoji,
/// quotes or backslashes (every one of which the canonicaliser must look at).
#[rustfmt::skip]
const DENSE: &[&str] = &[
    "the", "release", "notes", "for", "version", "summarise", "changes", "since", "last",
    "tag", "café", "naïve", "über", "pull", "request", "merged", "fixes", "\"quoted\"",
    "path\\to\\file", "—", "résumé", "error", "handling", "in", "parser", "🚀", "tests",
    "and", "docs", "of", "a", "with", "commit", "author", "review", "deploy", "señor",
];

/// Deterministic prose from `words`, wrapped at about 72 columns.
fn prose(words: &[&str], seed: &mut u64, bytes: usize) -> String {
    let mut text = String::new();
    let mut line = 0;
    while text.len() < bytes {
        *seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let word = words[(*seed >> 33) as usize % words.len()];
        text.push_str(word);
        line += word.len() + 1;
        if line > 72 {
            text.push('\n');
            line = 0;
        } else {
            text.push(' ');
        }
    }
    text
}

/// A `sampling/createMessage` params object of roughly `bytes` canonical bytes.
fn request(words: &[&str], bytes: usize) -> Map<String, Value> {
    let mut seed = 42;
    let turns = (bytes / 680).max(2);
    let messages: Vec<Value> = (0..turns)
        .map(|i| {
            json!({
                "role": if i % 2 == 0 { "user" } else { "assistant" },
                "content": { "type": "text", "text": prose(words, &mut seed, 600) },
            })
        })
        .collect();
    let params = json!({
        "messages": messages,
        "systemPrompt": prose(words, &mut seed, 240),
        "includeContext": "thisServer",
        "modelPreferences": {
            "hints": [{ "name": "claude-sonnet" }, { "name": "gpt-4o" }],
            "costPriority": 0.3,
            "speedPriority": 0.8,
            "intelligencePriority": 0.5
        },
        "maxTokens": 1024,
        "temperature": 0.2,
        "stopSequences": ["\n\nHuman:"],
        "metadata": { "trace": "b7e1" }
    });
    match params {
        Value::Object(map) => map,
        _ => unreachable!("params is an object literal"),
    }
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

fn nfc_value(value: &Value) -> Value {
    match value {
        Value::String(s) => Value::String(s.nfc().collect()),
        Value::Array(items) => Value::Array(items.iter().map(nfc_value).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.nfc().collect(), nfc_value(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The obvious implementation: build the payload, NFC it, canonicalise, hash.
fn naive_identity(server: &str, params: &Map<String, Value>, fields: &[String]) -> String {
    let payload: Map<String, Value> = fields
        .iter()
        .map(|f| (f.clone(), params.get(f).cloned().unwrap_or(Value::Null)))
        .collect();
    let canonical = serde_json_canonicalizer::to_vec(&nfc_value(&Value::Object(payload)))
        .expect("canonicalisable");
    let digest = Sha256::digest(&canonical);
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("{server}:{hex}")
}

fn bench(c: &mut Criterion) {
    let fields = fields();
    for (label, words, size) in [
        ("4KiB", ENGLISH, 4 * 1024),
        ("64KiB", ENGLISH, 64 * 1024),
        ("dense-4KiB", DENSE, 4 * 1024),
        ("dense-64KiB", DENSE, 64 * 1024),
    ] {
        let params = request(words, size);
        let mut canonical = Vec::new();
        write_identity_payload(&params, &fields, &mut canonical);
        assert_eq!(
            request_identity("srv", &params, &fields).as_str(),
            naive_identity("srv", &params, &fields),
            "the fast and naive paths agree"
        );

        let mut group = c.benchmark_group(format!("identity/{label}"));
        group.throughput(Throughput::Bytes(canonical.len() as u64));
        group.bench_function("sha256_of_canonical", |b| {
            b.iter(|| Sha256::digest(black_box(&canonical)))
        });
        group.bench_function("request_identity", |b| {
            b.iter(|| request_identity(black_box("srv"), black_box(&params), &fields))
        });
        group.bench_function("naive", |b| {
            b.iter(|| naive_identity(black_box("srv"), black_box(&params), &fields))
        });
        group.finish();
        eprintln!(
            "identity/{label}: canonical payload is {} bytes",
            canonical.len()
        );
    }
}

criterion_group!(benches, bench);

/// `IDENTITY_LOOP=<size>/<function> IDENTITY_ITERS=n` runs one function `n`
/// times and exits, for `perf stat -e cycles:u` (CPU cycles are steadier
/// than wall time on a shared machine). `canonical_only` writes the canonical
/// payload into a byte counter: the canonicaliser without the hasher.
/// Otherwise, criterion as usual.
fn main() {
    if let Ok(which) = std::env::var("IDENTITY_LOOP") {
        let iters: u64 = std::env::var("IDENTITY_ITERS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(100_000);
        let (size, function) = which
            .split_once('/')
            .expect("IDENTITY_LOOP=<size>/<function>");
        let (words, bytes) = match size {
            "4KiB" => (ENGLISH, 4 * 1024),
            "64KiB" => (ENGLISH, 64 * 1024),
            "dense-4KiB" => (DENSE, 4 * 1024),
            _ => (DENSE, 64 * 1024),
        };
        let fields = fields();
        let params = request(words, bytes);
        let mut canonical = Vec::new();
        write_identity_payload(&params, &fields, &mut canonical);
        for _ in 0..iters {
            match function {
                "sha256_of_canonical" => {
                    black_box(Sha256::digest(black_box(&canonical)));
                }
                "request_identity" => {
                    black_box(request_identity(
                        black_box("srv"),
                        black_box(&params),
                        &fields,
                    ));
                }
                "canonical_only" => {
                    let mut count = ByteCount::default();
                    write_identity_payload(black_box(&params), &fields, &mut count);
                    black_box(count);
                }
                "none" => {}
                _ => panic!("unknown function {function}"),
            }
        }
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
