//! Inline suppressions reach the editor as they reach `mcpc check`: the
//! server publishes exactly the findings the compiler's check gives for
//! `tests/cases/check/suppression.mcpolicy` (suppressed warnings gone,
//! W0701/W0702 present), at the same lines.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Client, URI, root};
use mcpolicy_compiler::db::analyze_parsed;
use mcpolicy_compiler::parse::parse;

#[test]
fn published_findings_are_the_checks() {
    let text =
        std::fs::read_to_string(root().join("tests/cases/check/suppression.mcpolicy")).unwrap();
    let expected: Vec<(String, usize)> = analyze_parsed(&parse(&text))
        .diagnostics
        .iter()
        .map(|d| {
            (
                d.code.as_str().to_owned(),
                text[..d.span.start].matches('\n').count(),
            )
        })
        .collect();
    assert!(expected.iter().any(|(c, _)| c == "W0701"));
    assert!(expected.iter().any(|(c, _)| c == "W0702"));

    let mut client = Client::memory();
    client.initialize(&["utf-8"]);
    client.open(URI, &text);
    let published = client.diagnostics_for(URI, 1);
    let actual: Vec<(String, usize)> = published["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["code"].as_str().unwrap().to_owned(),
                usize::try_from(d["range"]["start"]["line"].as_u64().unwrap()).unwrap(),
            )
        })
        .collect();
    let mut expected_sorted = expected.clone();
    let mut actual_sorted = actual.clone();
    expected_sorted.sort();
    actual_sorted.sort();
    assert_eq!(actual_sorted, expected_sorted, "{published:#}");
    assert!(client.shutdown());
}
