//! The outline kept piece by piece (`handlers/document_symbol.rs`) against
//! a fresh server's: after any chain of random edits (lines added and
//! removed, pieces merged and split, non-ASCII text, both encodings), the
//! `documentSymbol` answer of the server that kept fragments equals that
//! of a server that opens the final text. `PROPTEST_CASES` sets a long run.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Client, URI, root};
use proptest::prelude::*;
use serde_json::{Value, json};

const SNIPPETS: &[&str] = &[
    "",
    "\n",
    "x",
    "}",
    "{",
    "# note ✓\n",
    "\nserver \"new-😀\" {\n  max_tokens 5\n}\n",
    "\n  rate 3 per 1m as acme.x\n",
    "é",
    "\nreason acme.y { retryable true; ttl 5s }\n",
];

fn outline(client: &mut Client) -> Value {
    client.ok(
        "textDocument/documentSymbol",
        json!({ "textDocument": { "uri": URI } }),
    )
}

proptest! {
    #![proptest_config(common::proptest_config(24))]

    #[test]
    fn kept_outline_equals_a_fresh_one(
        edits in prop::collection::vec((0.0..1.0f64, 0usize..60, 0..SNIPPETS.len()), 1..8),
        utf8 in any::<bool>(),
    ) {
        let encodings: &[&str] = if utf8 { &["utf-8"] } else { &["utf-16"] };
        let mut text = std::fs::read_to_string(root().join("examples/team-gateway.mcpolicy")).unwrap();
        let mut client = Client::memory();
        client.initialize(encodings);
        client.open(URI, &text);
        outline(&mut client);
        for (version, (at, length, snippet)) in edits.into_iter().enumerate() {
            let change = common::random_edit(&mut text, at, length, SNIPPETS[snippet], utf8);
            client.change(URI, 2 + version as i64, change);
            let kept = outline(&mut client);

            let mut fresh = Client::memory();
            fresh.initialize(encodings);
            fresh.open(URI, &text);
            prop_assert_eq!(&kept, &outline(&mut fresh), "text:\n{}", text);
            prop_assert!(fresh.shutdown());
        }
        prop_assert!(client.shutdown());
    }
}

/// Statements carry their value as detail.
#[test]
fn statements_carry_their_value() {
    let mut client = Client::memory();
    client.initialize(&["utf-16"]);
    client.open(
        URI,
        "mcpolicy 1\nserver \"a\" {\n  rate 30   per 1m as policy.rate_limit  # why\n  max_input 64 KiB\n  models \"a#b\", \"c\"\n}\n",
    );
    let symbols = outline(&mut client);
    let children = &symbols[1]["children"];
    assert_eq!(children[0]["name"], "rate");
    assert_eq!(children[0]["detail"], "30 per 1m as policy.rate_limit");
    assert_eq!(children[1]["detail"], "64 KiB");
    assert_eq!(children[2]["detail"], "\"a#b\", \"c\"");
    assert!(client.shutdown());
}
