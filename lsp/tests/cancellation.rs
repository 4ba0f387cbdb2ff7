//! A newer edit cancels a diagnostics check in flight: the check runs on a
//! worker over a clone of the database, setting the input on the main
//! thread makes salsa unwind it, and nothing is published for the version
//! it was checking. Diagnostics arrive with increasing versions and end
//! with those of the final text.
//!
//! Deterministic: a hook holds the first check (after the worker has its
//! clone of the database, before any query) until salsa's cancellation flag
//! is up, which happens only when the main thread sets the input for the
//! edit the test sends; the check's first query then unwinds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Client, URI, at, position};
use crossbeam_channel::{Receiver, unbounded};
use mcpolicy_compiler::db::{Database, SourceText};
use mcpolicy_lsp::main_loop::{CheckOutcome, Hooks};
use salsa::Database as _;
use serde_json::{Value, json};

/// Lines before the first server block.
const HEADER_LINES: u32 = 2;
/// Lines per server block.
const BLOCK_LINES: u32 = 5;

/// A policy of `blocks` server blocks, five lines each.
fn policy(blocks: u32) -> String {
    let mut text = String::from("mcpolicy 1\ndefaults { max_tokens 4096; rate 30 per 1m }\n");
    for i in 0..blocks {
        text.push_str(&format!(
            "server \"srv-{i}\" {{\n  budget 50 requests per day\n  max_input 64 KiB\n  consent first\n}}\n"
        ));
    }
    text
}

/// The line of block `i`'s `consent first`.
fn consent_line(i: u32) -> u32 {
    HEADER_LINES + BLOCK_LINES * i + 3
}

/// Misspells `consent` in block `i`: an E0101 there.
fn misspell(i: u32) -> Value {
    json!([{ "range": { "start": { "line": consent_line(i), "character": 2 }, "end": { "line": consent_line(i), "character": 9 } }, "text": "consnt" }])
}

/// Applies `misspell(i)` to the text.
fn misspelt(text: &str, i: u32) -> String {
    let mut lines: Vec<String> = text.split('\n').map(str::to_owned).collect();
    let line = &mut lines[consent_line(i) as usize];
    assert!(line.starts_with("  consent"), "{line}");
    line.replace_range(2..9, "consnt");
    lines.join("\n")
}

/// The compiler's findings for `text`: code and start position.
fn expected(text: &str) -> Vec<(String, Value)> {
    let db = Database::default();
    let source = SourceText::new(&db, "p.mcpolicy".into(), text.into());
    mcpolicy_compiler::db::diagnostics(&db, source)
        .iter()
        .map(|d| (d.code.as_str().to_owned(), position(text, d.span.start)))
        .collect()
}

/// What the server published: code and start position.
fn published(params: &Value) -> Vec<(String, Value)> {
    params["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["code"].as_str().unwrap().to_owned(),
                d["range"]["start"].clone(),
            )
        })
        .collect()
}

/// The versions of every `publishDiagnostics` in the transcript.
fn published_versions(client: &Client) -> Vec<i64> {
    client
        .transcript
        .iter()
        .filter(|m| m["method"] == "textDocument/publishDiagnostics")
        .map(|m| m["params"]["version"].as_i64().unwrap())
        .collect()
}

/// Waits on a check's clone of the database until salsa raises the
/// cancellation flag (the main thread is setting an input), without
/// unwinding; gives up after a minute so that a broken server fails the
/// test instead of hanging it.
fn wait_for_cancellation(db: &Database) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let raised =
            salsa::Cancelled::catch(AssertUnwindSafe(|| db.unwind_if_revision_cancelled()))
                .is_err();
        if raised {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Each check's document version and outcome, in the order they reached
/// the main loop.
type Outcomes = Arc<Mutex<Vec<(i32, CheckOutcome)>>>;

/// Hooks that hold the check of version 1 until an edit cancels it, report
/// when it has started, and record every check's outcome.
fn holding_version_1() -> (Hooks, Receiver<()>, Outcomes) {
    let (started, started_rx) = unbounded();
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let record = outcomes.clone();
    let hooks = Hooks {
        before_check: Some(Arc::new(move |db: &Database, _uri: &_, version: i32| {
            if version == 1 {
                started.send(()).unwrap();
                wait_for_cancellation(db);
            }
        })),
        check_done: Some(Arc::new(move |_uri: &_, version: i32, outcome| {
            record.lock().unwrap().push((version, outcome));
        })),
    };
    (hooks, started_rx, outcomes)
}

#[test]
fn an_edit_cancels_the_running_check() {
    let (hooks, started, outcomes) = holding_version_1();
    let mut client = Client::memory_with(hooks);
    client.initialize(&[]);
    let text = policy(2_000);
    client.open(URI, &text);
    // The check of version 1 is running on its worker; edit now.
    started.recv_timeout(Duration::from_secs(60)).unwrap();
    client.change(URI, 2, misspell(1_234));
    let params = client.diagnostics(URI);
    assert_eq!(params["version"], 2, "version 1 was published: {params:#}");
    let text = misspelt(&text, 1_234);
    assert_eq!(published(&params), expected(&text));
    assert_eq!(
        published(&params),
        [(
            "E0101".to_owned(),
            json!({ "line": consent_line(1_234), "character": 2 })
        )]
    );
    // The result of version 1 reached the loop as a cancellation.
    client.ok("textDocument/hover", at(URI, 0, 1));
    let outcomes = outcomes.lock().unwrap().clone();
    assert_eq!(
        outcomes,
        [(1, CheckOutcome::Cancelled), (2, CheckOutcome::Published)]
    );
    assert_eq!(published_versions(&client), [2]);
    assert!(client.shutdown());
}

/// Opens a 10,000-line policy, sends `edits` misspellings in a burst
/// (after `started`, if given), and checks what is published: increasing
/// versions, the last one for the final text, equal to the compiler's
/// findings on it.
fn burst(mut client: Client, started: Option<&Receiver<()>>, edits: u32) -> Client {
    client.initialize(&[]);
    let mut text = policy(2_000);
    client.open(URI, &text);
    if let Some(started) = started {
        started.recv_timeout(Duration::from_secs(60)).unwrap();
    }
    for i in 0..edits {
        // Spread over the file, so that each edit re-parses another item.
        let block = (i * 37) % 2_000;
        client.change(URI, 2 + i64::from(i), misspell(block));
        text = misspelt(&text, block);
    }
    let last = 1 + i64::from(edits);
    let params = client.diagnostics_for(URI, last);
    let expected = expected(&text);
    assert_eq!(expected.len(), edits as usize);
    assert_eq!(published(&params), expected);
    // Ask something, so that anything published late would be seen first.
    client.ok("textDocument/hover", at(URI, 0, 1));
    let versions = published_versions(&client);
    assert!(
        versions.windows(2).all(|w| w[0] < w[1]),
        "versions not increasing: {versions:?}"
    );
    assert_eq!(versions.last(), Some(&last), "{versions:?}");
    client
}

#[test]
fn a_burst_during_a_check_ends_with_the_final_text() {
    let (hooks, started, outcomes) = holding_version_1();
    let client = burst(Client::memory_with(hooks), Some(&started), 60);
    let outcomes = outcomes.lock().unwrap().clone();
    assert_eq!(outcomes.first(), Some(&(1, CheckOutcome::Cancelled)));
    assert!(
        !published_versions(&client).contains(&1),
        "the cancelled version was published"
    );
    // Every outcome but publication is for a version a newer one replaced.
    let last_published = outcomes
        .iter()
        .rev()
        .find(|(_, o)| *o == CheckOutcome::Published);
    assert_eq!(last_published, Some(&(61, CheckOutcome::Published)));
    assert!(client.shutdown());
}

#[test]
fn a_burst_without_hooks_over_stdio_and_in_process() {
    // No hook: whether a check is cancelled depends on timing, but what is
    // published must not.
    for client in [Client::memory(), Client::stdio()] {
        let client = burst(client, None, 60);
        assert!(client.shutdown());
    }
}
