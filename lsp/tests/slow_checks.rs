//! A document that is slow to check stalls neither the editor's other
//! documents nor its own next edit: the real binary, over stdio.
//!
//! The slow document is 4,000 server globs that all share ids (`*x000001z*`,
//! `*x000002z*`, …), the most work the server-pattern comparison can be
//! given (`docs/spec/language.md`, "Server patterns"). The bounds are hang
//! guards for a debug build on a loaded machine, not timing targets: before
//! the comparison was bounded and cancellable, this document's check took
//! minutes, and an edit to it waited for the stale check to end.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{Client, at};
use serde_json::{Value, json};

const SLOW: &str = "file:///work/slow.mcpolicy";
const OTHER: &str = "file:///work/other.mcpolicy";

/// Far above what the bounded check costs in a debug build.
const BOUND: Duration = Duration::from_secs(90);

fn slow_policy(globs: usize, comment: &str) -> String {
    let mut text = format!("mcpolicy 1\n# {comment}\n");
    for i in 0..globs {
        text.push_str(&format!("server \"*x{i:06}z*\" {{ sampling on }}\n"));
    }
    text
}

fn replace_all(text: &str) -> Value {
    json!([{ "text": text }])
}

/// Waits for the `publishDiagnostics` of `uri` at `version`, within
/// [`BOUND`]; every `publishDiagnostics` of `uri` on the way, in order.
fn published_until(client: &mut Client, uri: &str, version: i64) -> Vec<i64> {
    let deadline = Instant::now() + BOUND;
    let mut versions = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = client
            .recv_value_within(left)
            .unwrap_or_else(|| panic!("no diagnostics for version {version} within {BOUND:?}"));
        if message["method"] == "textDocument/publishDiagnostics" && message["params"]["uri"] == uri
        {
            let got = message["params"]["version"].as_i64().unwrap();
            versions.push(got);
            if got == version {
                return versions;
            }
        }
    }
}

#[test]
fn a_hover_in_another_document_does_not_wait_for_a_slow_check() {
    let mut client = Client::stdio();
    client.initialize(&["utf-8"]);
    let other = "mcpolicy 1\nserver \"github\" { sampling off }\n";
    client.open(OTHER, other);
    published_until(&mut client, OTHER, 1);
    client.open(SLOW, &slow_policy(4000, "first"));
    // The edit sets the slow document's text while its first check runs.
    client.change(SLOW, 2, replace_all(&slow_policy(4000, "second")));
    let asked = Instant::now();
    let id = client.request_async("textDocument/hover", at(OTHER, 1, 2));
    let deadline = asked + BOUND;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = client
            .recv_value_within(left)
            .unwrap_or_else(|| panic!("no hover answer within {BOUND:?}"));
        if message["id"] == json!(id) {
            assert!(message.get("result").is_some(), "{message}");
            break;
        }
    }
    assert!(client.shutdown());
}

#[test]
fn an_edit_cancels_the_stale_check_and_nothing_stale_follows() {
    let mut client = Client::stdio();
    client.initialize(&["utf-8"]);
    client.open(SLOW, &slow_policy(4000, "first"));
    client.change(SLOW, 2, replace_all(&slow_policy(4000, "second")));
    // The last edit leaves a clean file, quick to check.
    client.change(SLOW, 3, replace_all("mcpolicy 1\n"));
    let versions = published_until(&mut client, SLOW, 3);
    assert!(
        versions.windows(2).all(|w| w[0] < w[1]),
        "published out of order: {versions:?}"
    );
    // Nothing for an older version follows the newest one.
    while let Some(message) = client.recv_value_within(Duration::from_secs(2)) {
        if message["method"] == "textDocument/publishDiagnostics" {
            assert_eq!(message["params"]["version"], 3, "{message}");
        }
    }
    assert!(client.shutdown());
}
