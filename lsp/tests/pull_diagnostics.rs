//! Pull diagnostics (`textDocument/diagnostic`) against pushed ones, over
//! random edits of a real policy, through the server in-process: after
//! every edit, what a pulling client shows (the last full report, kept
//! while the server answers `unchanged`) equals what the server pushes to
//! a client that does not pull, which `mcpc check`'s differential tests
//! hold; and `unchanged` comes exactly when the findings did not change.
//! `PROPTEST_CASES` sets a long run.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Client, URI, root};
use proptest::prelude::*;
use serde_json::{Value, json};

/// A client that declares pull diagnostics.
fn pulling_client() -> Client {
    let mut client = Client::memory();
    let result = client.ok(
        "initialize",
        json!({ "capabilities": { "textDocument": { "diagnostic": { "dynamicRegistration": false } } } }),
    );
    assert_eq!(
        result["capabilities"]["diagnosticProvider"]["interFileDependencies"],
        false
    );
    client.notify("initialized", json!({}));
    client
}

fn pull(client: &mut Client, previous: Option<&str>) -> Value {
    client.ok(
        "textDocument/diagnostic",
        json!({ "textDocument": { "uri": URI }, "previousResultId": previous }),
    )
}

const SNIPPETS: &[&str] = &[
    "",
    "\n",
    "x",
    "}",
    "# note\n",
    "  max_tokens 0\n",
    "server \"new-*\" {\n  sampling off\n  max_tokens 5\n}\n",
    " as acme.undeclared",
    "😀",
];

proptest! {
    #![proptest_config(common::proptest_config(16))]

    #[test]
    fn pulled_diagnostics_equal_pushed_ones(
        edits in prop::collection::vec((0.0..1.0f64, 0usize..30, 0..SNIPPETS.len()), 1..8),
    ) {
        let mut text = std::fs::read_to_string(root().join("examples/team-gateway.mcpolicy")).unwrap();
        let mut pusher = Client::memory();
        pusher.initialize(&["utf-16"]);
        pusher.open(URI, &text);
        let mut puller = pulling_client();
        puller.open(URI, &text);

        let first = pull(&mut puller, None);
        prop_assert_eq!(&first["kind"], "full");
        let mut shown = first["items"].clone();
        let mut result_id = first["resultId"].as_str().unwrap().to_owned();
        prop_assert_eq!(&shown, &pusher.diagnostics_for(URI, 1)["diagnostics"]);

        for (i, (at, length, snippet)) in edits.into_iter().enumerate() {
            let version = 2 + i as i64;
            let change = common::random_edit(&mut text, at, length, SNIPPETS[snippet], false);
            pusher.change(URI, version, change.clone());
            puller.change(URI, version, change);

            let pushed = pusher.diagnostics_for(URI, version)["diagnostics"].clone();
            let report = pull(&mut puller, Some(&result_id));
            match report["kind"].as_str() {
                Some("unchanged") => {
                    prop_assert_eq!(&report["resultId"], &json!(result_id));
                    prop_assert_eq!(&shown, &pushed, "`unchanged`, but the findings changed");
                }
                Some("full") => {
                    prop_assert_ne!(&report["items"], &shown, "a full report of the same findings");
                    shown = report["items"].clone();
                    result_id = report["resultId"].as_str().unwrap().to_owned();
                    prop_assert_eq!(&shown, &pushed);
                }
                other => prop_assert!(false, "unexpected report kind {other:?}: {report}"),
            }
        }
        prop_assert!(pusher.shutdown());
        prop_assert!(puller.shutdown());
    }
}

/// The same findings at another version are `unchanged`; a change to them
/// is a full report; nothing is pushed to a client that pulls.
#[test]
fn result_ids_follow_the_findings_not_the_version() {
    let text = "mcpolicy 1\nserver \"a\" {\n  max_tokns 5\n}\n";
    let mut client = pulling_client();
    client.open(URI, text);
    let first = pull(&mut client, None);
    assert_eq!(first["kind"], "full");
    assert_eq!(first["items"][0]["code"], "E0101", "{first}");
    let id = first["resultId"].as_str().unwrap().to_owned();

    // A comment after the findings changes none of them.
    client.change(URI, 2, json!([{ "text": format!("{text}# a comment\n") }]));
    let same = pull(&mut client, Some(&id));
    assert_eq!(same, json!({ "kind": "unchanged", "resultId": id }));

    // Fixing the typo changes them.
    client.change(
        URI,
        3,
        json!([{ "text": text.replace("max_tokns", "max_tokens") }]),
    );
    let fixed = pull(&mut client, Some(&id));
    assert_eq!(fixed["kind"], "full");
    assert_eq!(fixed["items"], json!([]));
    assert_ne!(fixed["resultId"], json!(id));

    assert!(
        !client.was_pushed_diagnostics(),
        "diagnostics pushed to a client that pulls"
    );
    assert!(client.shutdown());
}
