//! What the server keeps between requests for semantic tokens (each
//! piece's tokens, `handlers/semantic_tokens.rs`) and folding (each
//! piece's folds, `ide::folding_ranges`), and inlay hints computed for the
//! visible servers only, against a fresh server's answers: after any chain
//! of random edits (lines added and removed, pieces merged and split,
//! non-ASCII text, both encodings), `semanticTokens/full`, `foldingRange`
//! and `inlayHint` equal those of a server that opens the final text, and
//! the kept full tokens equal the whole-file `range` answer over the whole
//! file. `PROPTEST_CASES` sets a long run.

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

/// The answers that may come from kept state: full tokens (data only: the
/// result id differs), the tokens of a range spanning the whole file
/// (computed from the whole file's tree), folding, and inlay hints for all
/// lines.
fn answers(client: &mut Client) -> (Value, Value, Value, Value) {
    let doc = json!({ "uri": URI });
    let full = client.ok(
        "textDocument/semanticTokens/full",
        json!({ "textDocument": doc }),
    );
    let whole = json!({ "start": { "line": 0, "character": 0 },
                        "end": { "line": 100_000, "character": 0 } });
    let range = client.ok(
        "textDocument/semanticTokens/range",
        json!({ "textDocument": doc, "range": whole }),
    );
    let folding = client.ok("textDocument/foldingRange", json!({ "textDocument": doc }));
    let hints = client.ok(
        "textDocument/inlayHint",
        json!({ "textDocument": doc, "range": whole }),
    );
    (full["data"].clone(), range["data"].clone(), folding, hints)
}

proptest! {
    #![proptest_config(common::proptest_config(24))]

    #[test]
    fn kept_answers_equal_a_fresh_servers(
        edits in prop::collection::vec((0.0..1.0f64, 0usize..60, 0..SNIPPETS.len()), 1..8),
        utf8 in any::<bool>(),
    ) {
        let encodings: &[&str] = if utf8 { &["utf-8"] } else { &["utf-16"] };
        let mut text = std::fs::read_to_string(root().join("examples/team-gateway.mcpolicy")).unwrap();
        let mut client = Client::memory();
        client.initialize(encodings);
        client.open(URI, &text);
        answers(&mut client);
        for (version, (at, length, snippet)) in edits.into_iter().enumerate() {
            let change = common::random_edit(&mut text, at, length, SNIPPETS[snippet], utf8);
            client.change(URI, 2 + version as i64, change);
            let kept = answers(&mut client);

            let mut fresh = Client::memory();
            fresh.initialize(encodings);
            fresh.open(URI, &text);
            let fresh_answers = answers(&mut fresh);
            prop_assert_eq!(&kept.0, &kept.1, "kept full tokens against the whole-file range; text:\n{}", text);
            prop_assert_eq!(&kept, &fresh_answers, "text:\n{}", text);
            prop_assert!(fresh.shutdown());
        }
        prop_assert!(client.shutdown());
    }
}
