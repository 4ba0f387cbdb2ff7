//! The requests editors expect beyond the basics, over stdio:
//! `workspace/symbol`, `textDocument/documentHighlight`,
//! `textDocument/selectionRange`, and comment blocks in `foldingRange`.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Client, URI, offset, position};
use serde_json::{Value, json};

const OTHER: &str = "file:///work/other.mcpolicy";

const TEXT: &str = "# A gateway policy.\n# Two comment lines fold.\nmcpolicy 1\n\
reason acme.cap { retryable false; ttl forever }\n\
defaults {\n  max_tokens 4096\n  max_input 64 KiB as acme.cap\n}\n\
# one line alone does not\n\
server \"github-actions\" {\n  max_tokens 8192\n  sampling off as acme.cap\n}\n";

fn client() -> Client {
    let mut client = Client::stdio();
    client.initialize(&["utf-16"]);
    client.open(URI, TEXT);
    client.diagnostics_for(URI, 1);
    client
}

fn text_of(text: &str, range: &Value) -> String {
    text[offset(text, &range["start"])..offset(text, &range["end"])].to_owned()
}

#[test]
fn workspace_symbols_over_open_documents() {
    let mut client = client();
    client.open(OTHER, "mcpolicy 1\nserver \"gitlab\" { sampling off }\nreason acme.gate { retryable false; ttl forever }\n");
    client.diagnostics_for(OTHER, 1);
    let found = client.ok("workspace/symbol", json!({ "query": "git" }));
    let names: Vec<(String, String)> = found
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_owned(),
                s["location"]["uri"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("gitlab".to_owned(), OTHER.to_owned()),
            ("github-actions".to_owned(), URI.to_owned())
        ]
    );
    // Characters in order, any case: `ACp` is `acme.cap`, not `acme.gate`.
    let found = client.ok("workspace/symbol", json!({ "query": "ACp" }));
    let found = found.as_array().unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0]["name"], "acme.cap");
    assert_eq!(found[0]["kind"], 22); // EnumMember
    assert_eq!(text_of(TEXT, &found[0]["location"]["range"]), "acme.cap");
    // An empty query lists every item of every open document.
    let all = client.ok("workspace/symbol", json!({ "query": "" }));
    assert_eq!(all.as_array().unwrap().len(), 4 + 3);
    assert!(client.shutdown());
}

#[test]
fn document_highlight_of_a_reason_and_of_a_statement() {
    let mut client = client();
    let use_at = TEXT.rfind("acme.cap").unwrap();
    let highlights = client.ok(
        "textDocument/documentHighlight",
        json!({ "textDocument": { "uri": URI }, "position": position(TEXT, use_at) }),
    );
    let spans: Vec<(String, u64)> = highlights
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (text_of(TEXT, &h["range"]), h["kind"].as_u64().unwrap()))
        .collect();
    // The declaration is Write (3), the uses Read (2).
    assert_eq!(
        spans,
        [
            ("acme.cap".to_owned(), 3),
            ("acme.cap".to_owned(), 2),
            ("acme.cap".to_owned(), 2)
        ]
    );
    let on_statement = TEXT.rfind("max_tokens").unwrap() + 2;
    let highlights = client.ok(
        "textDocument/documentHighlight",
        json!({ "textDocument": { "uri": URI }, "position": position(TEXT, on_statement) }),
    );
    let lines: Vec<u64> = highlights
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["range"]["start"]["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, [5, 10]);
    let nothing = client.ok(
        "textDocument/documentHighlight",
        json!({ "textDocument": { "uri": URI }, "position": position(TEXT, TEXT.find("4096").unwrap()) }),
    );
    assert_eq!(nothing, Value::Null);
    assert!(client.shutdown());
}

#[test]
fn selection_ranges_grow_from_the_word_to_the_file() {
    let mut client = client();
    let inside = TEXT.find("64 KiB").unwrap() + 1;
    let ranges = client.ok(
        "textDocument/selectionRange",
        json!({ "textDocument": { "uri": URI }, "positions": [position(TEXT, inside)] }),
    );
    let mut chain = Vec::new();
    let mut at = &ranges[0];
    while !at.is_null() {
        chain.push(text_of(TEXT, &at["range"]));
        at = &at["parent"];
    }
    assert_eq!(
        chain,
        [
            "64".to_owned(),
            "max_input 64 KiB as acme.cap".to_owned(),
            "max_tokens 4096\n  max_input 64 KiB as acme.cap".to_owned(),
            "defaults {\n  max_tokens 4096\n  max_input 64 KiB as acme.cap\n}".to_owned(),
            TEXT.to_owned(),
        ]
    );
    assert!(client.shutdown());
}

#[test]
fn comment_blocks_fold() {
    let mut client = client();
    let folds = client.ok(
        "textDocument/foldingRange",
        json!({ "textDocument": { "uri": URI } }),
    );
    let folds: Vec<(u64, u64, String)> = folds
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["startLine"].as_u64().unwrap(),
                f["endLine"].as_u64().unwrap(),
                f["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        folds,
        [
            (0, 1, "comment".to_owned()),
            (4, 7, "region".to_owned()),
            (9, 12, "region".to_owned()),
        ]
    );
    assert!(client.shutdown());
}
