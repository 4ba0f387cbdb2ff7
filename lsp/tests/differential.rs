//! The binary's diagnostics against the compiler's (what `mcpc check`
//! prints), over stdio, on every check case and example: with the default
//! settings they are the same findings at the same places with the same
//! severities; `denyWarnings` changes only the severities; a `protocol`
//! setting leaves a file that has its own `protocol` line as it was.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Client, root};
use mcpolicy_compiler::codes::Severity;
use mcpolicy_compiler::db::{Database, SourceText, diagnostics};
use mcpolicy_compiler::line_index::{Encoding, LineIndex};
use serde_json::{Value, json};

/// (code, start line, start byte column, end line, end byte column, severity)
type Finding = (String, u64, u64, u64, u64, u64);

fn policies() -> Vec<(String, String)> {
    let mut found = Vec::new();
    for dir in ["tests/cases/check", "examples"] {
        for entry in std::fs::read_dir(root().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "mcpolicy") {
                // Some cases are deliberately not UTF-8: the server only
                // ever sees text.
                if let Ok(text) = std::fs::read_to_string(&path) {
                    let name = path.file_name().unwrap().to_string_lossy().into_owned();
                    found.push((format!("file:///cases/{dir}/{name}"), text));
                }
            }
        }
    }
    found.sort();
    found
}

fn compiler(text: &str) -> Vec<Finding> {
    let db = Database::default();
    let source = SourceText::new(&db, "p.mcpolicy".into(), text.to_owned());
    let index = LineIndex::new(text);
    diagnostics(&db, source)
        .iter()
        .map(|d| {
            let start = index.line_column(text, d.span.start, Encoding::Utf8);
            let end = index.line_column(text, d.span.end, Encoding::Utf8);
            (
                d.code.to_string(),
                start.line as u64,
                start.column as u64,
                end.line as u64,
                end.column as u64,
                match d.severity() {
                    Severity::Error => 1,
                    Severity::Warning => 2,
                },
            )
        })
        .collect()
}

fn published(params: &Value) -> Vec<Finding> {
    params["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let r = &d["range"];
            (
                d["code"].as_str().unwrap().to_owned(),
                r["start"]["line"].as_u64().unwrap(),
                r["start"]["character"].as_u64().unwrap(),
                r["end"]["line"].as_u64().unwrap(),
                r["end"]["character"].as_u64().unwrap(),
                d["severity"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Waits until every document in `uris` has been published once more.
fn publications(
    client: &mut Client,
    count: usize,
) -> std::collections::HashMap<String, Vec<Finding>> {
    let mut seen = std::collections::HashMap::new();
    while seen.len() < count {
        let params = client.diagnostics_for_any();
        seen.insert(
            params["uri"].as_str().unwrap().to_owned(),
            published(&params),
        );
    }
    seen
}

#[test]
fn the_server_publishes_what_the_compiler_finds_under_every_setting() {
    let policies = policies();
    assert!(policies.len() > 30, "{}", policies.len());
    let mut client = Client::stdio();
    client.initialize(&["utf-8"]);
    for (uri, text) in &policies {
        client.open(uri, text);
    }
    let defaults = publications(&mut client, policies.len());
    for (uri, text) in &policies {
        assert_eq!(defaults[uri], compiler(text), "{uri}");
    }

    client.notify(
        "workspace/didChangeConfiguration",
        json!({ "settings": { "mcpolicy": { "denyWarnings": true } } }),
    );
    let denied = publications(&mut client, policies.len());
    for (uri, text) in &policies {
        let expected: Vec<Finding> = compiler(text)
            .into_iter()
            .map(|(code, a, b, c, d, _)| (code, a, b, c, d, 1))
            .collect();
        assert_eq!(denied[uri], expected, "{uri}");
    }

    client.notify(
        "workspace/didChangeConfiguration",
        json!({ "settings": { "mcpolicy": { "denyWarnings": false, "protocol": "2026-07-28" } } }),
    );
    let revised = publications(&mut client, policies.len());
    let mut pinned = 0;
    for (uri, text) in &policies {
        if text
            .lines()
            .any(|l| l.trim_start().starts_with("protocol "))
        {
            pinned += 1;
            assert_eq!(revised[uri], compiler(text), "{uri}");
        }
    }
    assert!(pinned >= 5, "{pinned}");
    assert!(client.shutdown());
}
