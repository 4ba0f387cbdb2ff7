//! A crash in the server is seen, never silence: the built binary over
//! stdio, with a panic injected through `MCPOLICY_LSP_PANIC_ON` (a debug
//! build hook, `src/fault.rs`; this file is empty in release builds).
//!
//! - A checker panic is published as one error at the start of the
//!   document (code `checker-crashed`, source `mcpolicy-lsp`), never as an
//!   empty list, and is logged (`window/logMessage`, stderr) with the
//!   panic's message and location.
//! - The crash is not sticky: the next version without the marker gets the
//!   compiler's findings.
//! - A panicking request answers `InternalError` and is logged; a panicking
//!   notification handler is logged.
//! - Without the variable, the same text is checked normally: the control
//!   that shows the variable, not the text, makes the crash.

#![cfg(debug_assertions)]
#![allow(clippy::unwrap_used)]

mod common;

use common::{Client, URI, at};
use lsp_server::ErrorCode;
use mcpolicy_compiler::db::{Database, SourceText, diagnostics};
use mcpolicy_lsp::diagnostics::{CRASHED_CODE, CRASHED_SOURCE};
use mcpolicy_lsp::fault::{INJECTED, PANIC_ON};
use serde_json::{Value, json};

/// The marker: an ordinary comment, so that without the variable the text
/// is an ordinary policy.
const MARKER: &str = "crash-here-7f3a";

/// A policy with one error (E0107 on `sometimes`) and the marker.
fn crashing_text() -> String {
    format!("mcpolicy 1\n# {MARKER}\ndefaults {{\n  consent sometimes\n}}\n")
}

/// The codes the compiler finds in `text`, as `mcpc check` would.
fn compiler_codes(text: &str) -> Vec<String> {
    let db = Database::default();
    let source = SourceText::new(&db, "x.mcpolicy".to_owned(), text.to_owned());
    diagnostics(&db, source)
        .iter()
        .map(|d| d.code.as_str().to_owned())
        .collect()
}

fn codes(published: &Value) -> Vec<String> {
    published["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["code"].as_str().unwrap().to_owned())
        .collect()
}

/// The `window/logMessage` lines received so far.
fn log_lines(client: &Client) -> Vec<(i64, String)> {
    client
        .transcript
        .iter()
        .filter(|m| m["method"] == "window/logMessage")
        .map(|m| {
            (
                m["params"]["type"].as_i64().unwrap(),
                m["params"]["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_checker_panic_is_a_diagnostic_and_a_log_line() {
    let mut client = Client::stdio_with_env(&[(PANIC_ON, MARKER)]);
    client.initialize(&[]);
    client.open(URI, &crashing_text());

    let published = client.diagnostics_for(URI, 1);
    let found = published["diagnostics"].as_array().unwrap();
    assert_eq!(found.len(), 1, "{published}");
    let crash = &found[0];
    assert_eq!(crash["code"], CRASHED_CODE);
    assert_eq!(crash["source"], CRASHED_SOURCE);
    assert_eq!(crash["severity"], 1, "an error");
    assert_eq!(
        crash["range"],
        json!({ "start": { "line": 0, "character": 0 }, "end": { "line": 0, "character": 0 } })
    );
    let message = crash["message"].as_str().unwrap();
    assert!(
        message.starts_with("the checker crashed on this file, so its findings are not shown"),
        "{message}"
    );
    assert!(message.contains("language server's log"), "{message}");
    // The panic itself, with where it happened.
    assert!(message.contains(INJECTED), "{message}");
    assert!(
        message.contains("panicked at lsp/src/fault.rs:"),
        "{message}"
    );

    // Logged before it was published: one error line naming the document,
    // its version and the panic.
    let logged = log_lines(&client);
    assert_eq!(logged.len(), 1, "{logged:?}");
    let (kind, line) = &logged[0];
    assert_eq!(*kind, 1, "MessageType::ERROR");
    assert!(
        line.starts_with(&format!(
            "the checker crashed on {URI} (version 1): panicked at lsp/src/fault.rs:"
        )),
        "{line}"
    );
    assert!(line.contains(INJECTED), "{line}");

    // A request on the crashing document fails visibly, and is logged.
    let response = client.request("textDocument/hover", at(URI, 3, 3));
    let error = response.response_result.unwrap_err();
    assert_eq!(error.code, ErrorCode::InternalError as i32);
    assert_eq!(
        error.message,
        "textDocument/hover failed inside the server (a bug; the server's log says where)"
    );
    let logged = log_lines(&client);
    assert_eq!(logged.len(), 2, "{logged:?}");
    assert!(
        logged[1]
            .1
            .starts_with("textDocument/hover crashed: panicked at lsp/src/fault.rs:"),
        "{logged:?}"
    );

    // Not sticky: the next version, without the marker, gets the
    // compiler's findings, and the server is alive to give them.
    let fixed = crashing_text().replace(MARKER, "fine");
    client.change(URI, 2, json!([{ "text": fixed }]));
    let published = client.diagnostics_for(URI, 2);
    assert_eq!(codes(&published), compiler_codes(&fixed));
    assert_eq!(codes(&published), ["E0107"]);

    let (code, stderr) = client.exit_and_stderr();
    assert_eq!(code, Some(0), "{stderr}");
    // The same lines on stderr, and the panic hook's own report.
    assert!(
        stderr.contains(&format!(
            "mcpolicy-lsp: the checker crashed on {URI} (version 1): panicked at lsp/src/fault.rs:"
        )),
        "{stderr}"
    );
    // (`thread 'mcpolicy-check' (ID) panicked at …` in recent Rust.)
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("thread 'mcpolicy-check'")
                && l.contains(" panicked at lsp/src/fault.rs:")),
        "{stderr}"
    );
}

/// A notification handler that panics has no one to answer: it is logged,
/// and the server goes on with the text it had.
#[test]
fn a_notification_panic_is_a_log_line() {
    let mut client = Client::stdio_with_env(&[(PANIC_ON, MARKER)]);
    client.initialize(&[]);
    let clean = crashing_text().replace(MARKER, "fine");
    client.open(URI, &clean);
    assert_eq!(codes(&client.diagnostics_for(URI, 1)), ["E0107"]);
    client.change(URI, 2, json!([{ "text": crashing_text() }]));
    // Answered, over the text before the edit that crashed.
    let response = client.request("textDocument/hover", at(URI, 3, 3));
    assert!(response.response_result.is_ok(), "{response:?}");
    let logged = log_lines(&client);
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!(logged[0].0, 1, "MessageType::ERROR");
    assert!(
        logged[0]
            .1
            .starts_with("textDocument/didChange crashed: panicked at lsp/src/fault.rs:"),
        "{logged:?}"
    );
    assert!(
        logged[0].1.contains("an edit of a text containing"),
        "{logged:?}"
    );
    let (code, stderr) = client.exit_and_stderr();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains(
            "mcpolicy-lsp: textDocument/didChange crashed: panicked at lsp/src/fault.rs:"
        ),
        "{stderr}"
    );
}

/// The control: the same text without the variable is checked normally.
#[test]
fn without_the_variable_the_marker_is_an_ordinary_comment() {
    // Empty, as good as unset (and whatever the environment of the test).
    let mut client = Client::stdio_with_env(&[(PANIC_ON, "")]);
    client.initialize(&[]);
    client.open(URI, &crashing_text());
    let published = client.diagnostics_for(URI, 1);
    assert_eq!(codes(&published), compiler_codes(&crashing_text()));
    assert_eq!(codes(&published), ["E0107"]);
    let response = client.request("textDocument/hover", at(URI, 3, 3));
    assert!(response.response_result.is_ok());
    assert_eq!(log_lines(&client), []);
    let (code, stderr) = client.exit_and_stderr();
    assert_eq!(code, Some(0));
    assert_eq!(stderr, "");
}
