//! Semantic tokens `full/delta` and `range` against `full`, over random
//! edits of a real policy, through the server in-process: a delta applied
//! to the previous tokens gives exactly a fresh `full` answer, and a range
//! answer holds exactly the full answer's tokens on its lines.
//! `PROPTEST_CASES` sets a long run.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Client, URI, root};
use proptest::prelude::*;
use serde_json::{Value, json};

fn numbers(value: &Value) -> Vec<u64> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect()
}

/// Tokens as (line, start, length, type, modifiers), decoded from the
/// relative encoding.
fn absolute(data: &[u64]) -> Vec<[u64; 5]> {
    let (mut line, mut start) = (0, 0);
    data.chunks(5)
        .map(|t| {
            if t[0] > 0 {
                start = 0;
            }
            line += t[0];
            start += t[1];
            [line, start, t[2], t[3], t[4]]
        })
        .collect()
}

/// What an edit inserts: structure, statements, comments, non-ASCII text.
const SNIPPETS: &[&str] = &[
    "",
    "\n",
    "x",
    "}",
    "{",
    "# note ✓\n",
    "server \"new-*\" {\n  max_tokens 5\n}\n",
    "  rate 3 per 1m as acme.x\n",
    "😀",
    "budget 10 requests per day\n",
    "reason acme.y { retryable true; ttl 5s }\n",
];

/// One edit: a start (a fraction of the text), a length to delete, what to
/// insert.
fn edit() -> impl Strategy<Value = (f64, usize, usize)> {
    (0.0..1.0f64, 0usize..40, 0..SNIPPETS.len())
}

proptest! {
    #![proptest_config(common::proptest_config(24))]

    #[test]
    fn delta_and_range_agree_with_full(
        edits in prop::collection::vec(edit(), 1..8),
        utf8 in any::<bool>(),
        window in (0u32..120, 1u32..40),
    ) {
        let mut text = std::fs::read_to_string(root().join("examples/team-gateway.mcpolicy")).unwrap();
        let mut client = Client::memory();
        client.initialize(if utf8 { &["utf-8"] } else { &["utf-16"] });
        client.open(URI, &text);
        let doc = json!({ "uri": URI });
        let full = client.ok("textDocument/semanticTokens/full", json!({ "textDocument": doc }));
        let mut data = numbers(&full["data"]);
        let mut result_id = full["resultId"].as_str().unwrap().to_owned();
        for (version, (at, length, snippet)) in edits.into_iter().enumerate() {
            let change = common::random_edit(&mut text, at, length, SNIPPETS[snippet], utf8);
            client.change(URI, 2 + version as i64, change);

            let answer = client.ok(
                "textDocument/semanticTokens/full/delta",
                json!({ "textDocument": doc, "previousResultId": result_id }),
            );
            prop_assert!(answer.get("edits").is_some(), "a full answer to a known result id: {answer}");
            for e in answer["edits"].as_array().unwrap().iter().rev() {
                let start = e["start"].as_u64().unwrap() as usize;
                let end = start + e["deleteCount"].as_u64().unwrap() as usize;
                let inserted = e.get("data").map(numbers).unwrap_or_default();
                data.splice(start..end, inserted);
            }
            let fresh = client.ok("textDocument/semanticTokens/full", json!({ "textDocument": doc }));
            prop_assert_eq!(&data, &numbers(&fresh["data"]));
            result_id = fresh["resultId"].as_str().unwrap().to_owned();
        }

        // A range of whole lines holds exactly the tokens on those lines.
        let (first, count) = window;
        let last = first + count;
        let ranged = client.ok(
            "textDocument/semanticTokens/range",
            json!({ "textDocument": doc, "range": {
                "start": { "line": first, "character": 0 },
                "end": { "line": last, "character": 0 } } }),
        );
        let expected: Vec<[u64; 5]> = absolute(&data)
            .into_iter()
            .filter(|t| (u64::from(first)..u64::from(last)).contains(&t[0]))
            .collect();
        prop_assert_eq!(absolute(&numbers(&ranged["data"])), expected);
        prop_assert!(client.shutdown());
    }
}

/// A delta naming a result the server no longer holds gets every token.
#[test]
fn an_unknown_result_id_gets_full_tokens() {
    let text = std::fs::read_to_string(root().join("examples/team-gateway.mcpolicy")).unwrap();
    let mut client = Client::memory();
    client.initialize(&["utf-16"]);
    client.open(URI, &text);
    let doc = json!({ "uri": URI });
    let full = client.ok(
        "textDocument/semanticTokens/full",
        json!({ "textDocument": doc }),
    );
    let answer = client.ok(
        "textDocument/semanticTokens/full/delta",
        json!({ "textDocument": doc, "previousResultId": "no such id" }),
    );
    assert_eq!(answer["data"], full["data"]);
    assert_ne!(answer["resultId"], full["resultId"]);
    // The same text again: one empty delta.
    let again = client.ok(
        "textDocument/semanticTokens/full/delta",
        json!({ "textDocument": doc, "previousResultId": answer["resultId"] }),
    );
    assert_eq!(again["edits"], json!([]));
    assert!(client.shutdown());
}
