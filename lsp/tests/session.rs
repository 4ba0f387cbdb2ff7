//! A scripted editor session, against the server in-process and the
//! built binary over stdio: both must say exactly the same thing.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Client, URI, apply_edits, at, fixture, position};
use serde_json::{Value, json};

/// Runs the session; returns the client (for its transcript) and the
/// final text.
fn session(mut client: Client) -> (Vec<Value>, bool) {
    let mut text = fixture("session.mcpolicy");

    // The client offers UTF-16 only: positions count UTF-16 units.
    let init = client.initialize(&["utf-16"]);
    assert_eq!(init["capabilities"]["positionEncoding"], "utf-16");

    // didOpen: errors in two items, both reported, with UTF-16 ranges (an
    // emoji earlier on the first line counts two units).
    client.open(URI, &text);
    let published = client.diagnostics_for(URI, 1);
    let diagnostics = published["diagnostics"].as_array().unwrap().clone();
    let codes: Vec<&str> = diagnostics
        .iter()
        .map(|d| d["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["E0101", "E0401"], "{published:#}");
    let typo = text.find("max_tokns").unwrap();
    assert_eq!(diagnostics[0]["range"]["start"], position(&text, typo));
    assert_eq!(
        diagnostics[0]["range"]["start"],
        json!({"line": 5, "character": 18})
    );
    assert_eq!(
        diagnostics[0]["range"]["end"],
        json!({"line": 5, "character": 27})
    );
    assert!(
        diagnostics[0]["message"]
            .as_str()
            .unwrap()
            .contains("help: did you mean `max_tokens`?")
    );

    // didChange (incremental, UTF-16 range) fixes the first: one remains.
    let edit = json!({ "range": diagnostics[0]["range"], "text": "max_tokens" });
    text = apply_edits(
        &text,
        &[json!({ "range": edit["range"], "newText": "max_tokens" })],
    );
    client.change(URI, 2, json!([edit]));
    let published = client.diagnostics_for(URI, 2);
    let remaining = published["diagnostics"].as_array().unwrap().clone();
    assert_eq!(remaining.len(), 1, "{published:#}");
    assert_eq!(remaining[0]["code"], "E0401");

    // Hover on the statement keyword: meaning and effective value.
    let hover = client.ok("textDocument/hover", at(URI, 5, 20));
    let markdown = hover["contents"]["value"].as_str().unwrap();
    assert!(markdown.contains("clamped"), "{markdown}");
    assert!(
        markdown.contains("Effective for `😀-bot`: `max_tokens 100`"),
        "{markdown}"
    );
    // Hover on the server pattern: the effective block, inherited lines marked.
    let hover = client.ok("textDocument/hover", at(URI, 5, 9));
    let markdown = hover["contents"]["value"].as_str().unwrap();
    assert!(
        markdown.contains("max_input 64 KiB as acme.cap  # from defaults"),
        "{markdown}"
    );

    // Completion inside `defaults`: statements not yet stated.
    let line = text.lines().nth(3).unwrap();
    let brace = line.find('{').unwrap() as u32 + 1;
    let items = client.ok("textDocument/completion", at(URI, 3, brace));
    let labels: Vec<&str> = items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["label"].as_str().unwrap())
        .collect();
    assert!(
        labels.contains(&"sampling") && labels.contains(&"budget"),
        "{labels:?}"
    );
    assert!(
        !labels.contains(&"max_tokens"),
        "already stated: {labels:?}"
    );

    // A quick fix for the undeclared reason, applied by the client.
    let actions = client.ok(
        "textDocument/codeAction",
        json!({
            "textDocument": { "uri": URI },
            "range": remaining[0]["range"],
            "context": { "diagnostics": [remaining[0]] },
        }),
    );
    let actions = actions.as_array().unwrap();
    let fix = actions
        .iter()
        .find(|a| a["title"] == "replace with `acme.cap`")
        .unwrap_or_else(|| panic!("{actions:#?}"));
    assert_eq!(fix["isPreferred"], true);
    assert!(
        actions
            .iter()
            .any(|a| a["title"] == "declare reason `acme.cpa`")
    );
    let edits = fix["edit"]["changes"][URI].as_array().unwrap().clone();
    let changes: Vec<Value> = edits
        .iter()
        .map(|e| json!({ "range": e["range"], "text": e["newText"] }))
        .collect();
    text = apply_edits(&text, &edits);
    client.change(URI, 3, Value::Array(changes));
    let published = client.diagnostics_for(URI, 3);
    assert_eq!(published["diagnostics"], json!([]), "{published:#}");

    // Definition: from the use of `acme.cap` to its declaration.
    let use_at = position(&text, text.rfind("acme.cap").unwrap() + 2);
    let definition = client.ok(
        "textDocument/definition",
        json!({ "textDocument": { "uri": URI }, "position": use_at }),
    );
    assert_eq!(
        definition[0]["targetSelectionRange"]["start"],
        json!({"line": 1, "character": 7})
    );
    let references = client.ok(
        "textDocument/references",
        json!({ "textDocument": { "uri": URI }, "position": use_at, "context": { "includeDeclaration": true } }),
    );
    assert_eq!(references.as_array().unwrap().len(), 3);

    // Formatting: the same layout as `mcpc fmt`.
    let edits = client.ok(
        "textDocument/formatting",
        json!({ "textDocument": { "uri": URI }, "options": { "tabSize": 2, "insertSpaces": true } }),
    );
    let formatted = apply_edits(&text, edits.as_array().unwrap());
    assert_eq!(formatted, mcpolicy_compiler::format::format(&text).unwrap());
    assert!(
        formatted.contains("server \"😀-bot\" {\n  max_tokens 100"),
        "{formatted}"
    );

    // Symbols, inlay hints and semantic tokens answer too.
    let symbols = client.ok(
        "textDocument/documentSymbol",
        json!({ "textDocument": { "uri": URI } }),
    );
    let names: Vec<&str> = symbols
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["mcpolicy", "acme.cap", "defaults", "😀-bot", "b"]);
    let hints = client.ok(
        "textDocument/inlayHint",
        json!({ "textDocument": { "uri": URI }, "range": { "start": {"line": 0, "character": 0}, "end": {"line": 99, "character": 0} } }),
    );
    assert_eq!(hints[0]["label"], "defaults: max_input 64 KiB as acme.cap");
    let tokens = client.ok(
        "textDocument/semanticTokens/full",
        json!({ "textDocument": { "uri": URI } }),
    );
    assert!(tokens["data"].as_array().unwrap().len() > 20);

    let transcript = client.transcript.clone();
    (transcript, client.shutdown())
}

#[test]
fn scripted_session_in_process() {
    let (transcript, clean) = session(Client::memory());
    assert!(clean, "the session did not end cleanly");
    insta::with_settings!({ snapshot_path => "../../tests/cases/lsp/snapshots", prepend_module_to_snapshot => false }, {
        insta::assert_json_snapshot!("session_transcript", transcript);
    });
}

#[test]
fn scripted_session_over_stdio_matches_in_process() {
    let (memory, _) = session(Client::memory());
    let (stdio, clean) = session(Client::stdio());
    assert!(clean, "mcpolicy-lsp did not exit with code 0");
    assert_eq!(stdio, memory);
}

#[test]
fn utf8_is_negotiated_when_offered() {
    let mut client = Client::memory();
    let init = client.initialize(&["utf-8", "utf-16"]);
    assert_eq!(init["capabilities"]["positionEncoding"], "utf-8");
    let text = fixture("session.mcpolicy");
    client.open(URI, &text);
    let published = client.diagnostics_for(URI, 1);
    // `server "😀-bot" { ` is 20 bytes.
    assert_eq!(
        published["diagnostics"][0]["range"]["start"],
        json!({"line": 5, "character": 20})
    );
    assert!(client.shutdown());
}

#[test]
fn rename_a_declared_reason() {
    let mut client = Client::memory();
    client.initialize(&[]);
    let text = "mcpolicy 1\nreason acme.cap { retryable false; ttl forever }\n\
                defaults { max_input 64 KiB as acme.cap }\nserver \"a\" { sampling off as acme.cap }\n";
    client.open(URI, text);
    client.diagnostics_for(URI, 1);
    let at_use = position(text, text.rfind("acme.cap").unwrap());
    let range = client.ok(
        "textDocument/prepareRename",
        json!({ "textDocument": { "uri": URI }, "position": at_use }),
    );
    assert_eq!(range["start"], at_use);
    let edit = client.ok(
        "textDocument/rename",
        json!({ "textDocument": { "uri": URI }, "position": at_use, "newName": "acme.size_cap" }),
    );
    let renamed = apply_edits(text, edit["changes"][URI].as_array().unwrap());
    // No block spans lines here: no folding ranges.
    let folds = client.ok(
        "textDocument/foldingRange",
        json!({ "textDocument": { "uri": URI } }),
    );
    assert_eq!(folds, json!([]));
    assert_eq!(renamed.matches("acme.size_cap").count(), 3, "{renamed}");
    // A built-in reason the file does not declare, or a bad name: an error.
    let response = client.request(
        "textDocument/rename",
        json!({ "textDocument": { "uri": URI }, "position": at_use, "newName": "not a name" }),
    );
    assert!(response.response_result.is_err());
    assert!(client.shutdown());
}
