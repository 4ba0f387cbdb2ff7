//! Completion and hover over stdio: items that may appear once are not
//! offered again, accepting an item inside a word replaces the whole word
//! when the client supports `InsertReplaceEdit`, and a statement whose value
//! is wrong still gets its syntax help on its keyword.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Client, URI, apply_edits, position};
use serde_json::{Value, json};

fn initialize(client: &mut Client, insert_replace: bool) {
    client.ok(
        "initialize",
        json!({
            "processId": null,
            "rootUri": null,
            "capabilities": { "textDocument": { "completion": {
                "completionItem": { "insertReplaceSupport": insert_replace }
            } } },
        }),
    );
    client.notify("initialized", json!({}));
}

/// Opens `marked` (with `$0` for the cursor) as version `version`; the
/// text and the cursor's position.
fn open(client: &mut Client, version: i64, marked: &str) -> (String, Value) {
    let cursor = marked.find("$0").unwrap();
    let text = marked.replacen("$0", "", 1);
    if version == 1 {
        client.open(URI, &text);
    } else {
        client.change(URI, version, json!([{ "text": text }]));
    }
    client.diagnostics_for(URI, version);
    let at = json!({ "textDocument": { "uri": URI }, "position": position(&text, cursor) });
    (text, at)
}

fn labels(items: &Value) -> Vec<String> {
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["label"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn items_that_may_appear_once_are_not_offered_again() {
    let mut client = Client::stdio();
    initialize(&mut client, false);
    let (_, at) = open(&mut client, 1, "$0\n");
    let fresh = labels(&client.ok("textDocument/completion", at));
    for keyword in [
        "mcpolicy",
        "protocol",
        "error_code",
        "identity",
        "defaults",
        "reason",
        "server",
    ] {
        assert!(
            fresh.contains(&keyword.to_owned()),
            "{keyword} missing from {fresh:?}"
        );
    }
    let (_, at) = open(
        &mut client,
        2,
        "mcpolicy 1\nprotocol 2025-11-25\nerror_code -31010\nidentity messages\n\
         defaults { sampling on }\n$0\nserver \"a\" { sampling off }\n",
    );
    let offered = labels(&client.ok("textDocument/completion", at));
    assert_eq!(offered, ["reason", "server"]);
    // The item being rewritten at the cursor is not counted: on `protocol`'s
    // own keyword, `protocol` is still offered.
    let (_, at) = open(&mut client, 3, "mcpolicy 1\nprot$0\n");
    let offered = labels(&client.ok("textDocument/completion", at));
    assert!(offered.contains(&"protocol".to_owned()), "{offered:?}");
    assert!(!offered.contains(&"mcpolicy".to_owned()), "{offered:?}");
    assert!(client.shutdown());
}

/// One of each top-level item, written as a file would.
fn item_sample(keyword: &str) -> &'static str {
    match keyword {
        "mcpolicy" => "mcpolicy 1",
        "protocol" => "protocol 2025-11-25",
        "error_code" => "error_code -31010",
        "identity" => "identity messages",
        "reason" => "reason acme.x { retryable false; ttl forever }",
        "defaults" => "defaults { sampling on }",
        "server" => "server \"a\" { sampling off }",
        other => panic!("no sample of the item `{other}`: add one here"),
    }
}

/// Completion and the checker agree on every item keyword: after one
/// declaration, completion offers the keyword again exactly when the
/// checker accepts a second declaration without E0203.
#[test]
fn completion_offers_again_exactly_the_items_the_checker_lets_repeat() {
    let mut client = Client::stdio();
    initialize(&mut client, false);
    let mut verdicts = Vec::new();
    for (n, keyword) in mcpolicy_compiler::statements::item_keywords().enumerate() {
        let sample = item_sample(keyword);
        // The version line first, as the checker asks; `mcpolicy` itself is
        // then the one declaration.
        let once = if keyword == "mcpolicy" {
            "mcpolicy 1\n".to_owned()
        } else {
            format!("mcpolicy 1\n{sample}\n")
        };
        let completed = format!("file:///work/once-{n}.mcpolicy");
        client.open(&completed, &format!("{once}\n"));
        client.diagnostics_for(&completed, 1);
        let at = json!({
            "textDocument": { "uri": completed },
            "position": position(&once, once.len()),
        });
        let offered =
            labels(&client.ok("textDocument/completion", at)).contains(&keyword.to_owned());

        let twice = format!("file:///work/twice-{n}.mcpolicy");
        client.open(&twice, &format!("{once}{sample}\n"));
        let published = client.diagnostics_for(&twice, 1);
        let e0203 = published["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["code"] == "E0203");
        assert_eq!(
            offered, !e0203,
            "`{keyword}`: completion offers it again: {offered}; \
             a second one is E0203: {e0203} ({published})"
        );
        verdicts.push(offered);
    }
    // Both kinds exist, so the comparison above compared something.
    assert!(
        verdicts.contains(&true) && verdicts.contains(&false),
        "{verdicts:?}"
    );
    assert!(client.shutdown());
}

#[test]
fn accepting_inside_a_word_replaces_the_word_when_the_client_can() {
    let marked = "mcpolicy 1\nserver \"a\" { max_context this$0Servr }\n";
    for insert_replace in [true, false] {
        let mut client = Client::stdio();
        initialize(&mut client, insert_replace);
        let (text, at) = open(&mut client, 1, marked);
        let items = client.ok("textDocument/completion", at);
        let item = items
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["label"] == "thisServer")
            .unwrap()
            .clone();
        let edit = &item["textEdit"];
        if insert_replace {
            // Replace: the whole word becomes `thisServer`.
            let replaced = apply_edits(
                &text,
                &[json!({ "range": edit["replace"], "newText": edit["newText"] })],
            );
            assert!(
                replaced.contains("{ max_context thisServer }"),
                "{replaced}"
            );
            // Insert: only the typed prefix is replaced.
            let inserted = apply_edits(
                &text,
                &[json!({ "range": edit["insert"], "newText": edit["newText"] })],
            );
            assert!(inserted.contains("thisServerServr"), "{inserted}");
        } else {
            assert!(edit.get("range").is_some(), "{item:#}");
            assert!(edit.get("replace").is_none(), "{item:#}");
        }
        assert!(client.shutdown());
    }
}

#[test]
fn a_statement_with_a_wrong_value_gets_its_syntax_help() {
    let mut client = Client::stdio();
    initialize(&mut client, false);
    let cases = [
        (
            "mcpolicy 1\nserver \"a\" {\n  max_to$0kens lots\n}\n",
            "max_tokens",
            "E0103",
        ),
        (
            "mcpolicy 1\nserver \"a\" {\n  ra$0te 5 per fortnight\n}\n",
            "rate",
            "E0103",
        ),
        ("mcpolicy 1\nerror_co$0de abc\n", "error_code", "E0001"),
        (
            "mcpolicy 1\nreason acme.x { retryable false; tt$0l sometimes }\nserver \"a\" { sampling off as acme.x }\n",
            "ttl",
            "E0",
        ),
    ];
    for (version, (marked, keyword, code)) in (1..).zip(cases) {
        let (text, at) = open(&mut client, version, marked);
        let hover = client.ok("textDocument/hover", at);
        let markdown = hover["contents"]["value"]
            .as_str()
            .unwrap_or_else(|| panic!("no hover on `{keyword}` in {text:?}: {hover}"));
        assert!(
            markdown.starts_with(&format!("```mcpolicy\n{keyword}")),
            "{markdown}"
        );
        // And what is wrong with the rest of the statement.
        assert!(markdown.contains(&format!("**{code}")), "{markdown}");
        let start = text.find(keyword).unwrap();
        assert_eq!(hover["range"]["start"], position(&text, start));
        assert_eq!(
            hover["range"]["end"],
            position(&text, start + keyword.len())
        );
    }
    assert!(client.shutdown());
}
