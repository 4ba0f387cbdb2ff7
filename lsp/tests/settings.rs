//! The settings of `lsp/README.md` ("Settings") over stdio: sent in
//! `initializationOptions` or `workspace/didChangeConfiguration`, they change
//! what is published, and every open document is published again; a client
//! that pulls diagnostics and accepts `workspace/diagnostic/refresh` is asked
//! to pull again, and its next pull is a new report.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Client, URI};
use lsp_server::{Message, RequestId, Response};
use serde_json::{Value, json};

fn codes_and_severities(published: &Value) -> Vec<(String, u64)> {
    published["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["code"].as_str().unwrap().to_owned(),
                d["severity"].as_u64().unwrap(),
            )
        })
        .collect()
}

const UNUSED: &str = "mcpolicy 1\nreason acme.unused { retryable false; ttl forever }\n\
                      server \"a\" { sampling off }\n";

#[test]
fn deny_warnings_shows_warnings_as_errors_and_back() {
    let mut client = Client::stdio();
    client.initialize(&["utf-16"]);
    client.open(URI, UNUSED);
    let before = codes_and_severities(&client.diagnostics_for(URI, 1));
    assert_eq!(before, [("W0410".to_owned(), 2)]);

    client.notify(
        "workspace/didChangeConfiguration",
        json!({ "settings": { "mcpolicy": { "denyWarnings": true } } }),
    );
    let denied = codes_and_severities(&client.diagnostics(URI));
    assert_eq!(denied, [("W0410".to_owned(), 1)]);

    // The bare form (no `mcpolicy` key) and `null` for the default.
    client.notify(
        "workspace/didChangeConfiguration",
        json!({ "settings": { "denyWarnings": null } }),
    );
    assert_eq!(codes_and_severities(&client.diagnostics(URI)), before);

    // A wrong value changes nothing and says why in the log.
    client.notify(
        "workspace/didChangeConfiguration",
        json!({ "settings": { "mcpolicy": { "denyWarnings": "yes" } } }),
    );
    loop {
        let message = client.recv_value();
        if message["method"] == "window/logMessage" {
            let text = message["params"]["message"].as_str().unwrap();
            assert!(
                text.contains("`denyWarnings` must be true or false"),
                "{text}"
            );
            break;
        }
        assert_ne!(message["method"], "textDocument/publishDiagnostics");
    }
    assert!(client.shutdown());
}

/// -32030 is free under the default revision (2025-11-25) and reserved by
/// 2026-07-28 (E0503): the `protocol` setting decides for a file without a
/// `protocol` line, and never overrides one the file has.
#[test]
fn protocol_setting_is_the_revision_of_files_without_a_protocol_line() {
    let bare = "mcpolicy 1\nerror_code -32030\nserver \"a\" { sampling off }\n";
    let pinned =
        "mcpolicy 1\nprotocol 2025-11-25\nerror_code -32030\nserver \"a\" { sampling off }\n";
    let other = "file:///work/pinned.mcpolicy";

    let mut client = Client::stdio();
    let result = client.ok(
        "initialize",
        json!({
            "processId": null,
            "rootUri": null,
            "capabilities": {},
            "initializationOptions": { "protocol": "2026-07-28" },
        }),
    );
    assert!(result["capabilities"].is_object());
    client.notify("initialized", json!({}));
    client.open(URI, bare);
    let codes: Vec<String> = codes_and_severities(&client.diagnostics_for(URI, 1))
        .into_iter()
        .map(|(c, _)| c)
        .collect();
    assert_eq!(codes, ["E0503"]);
    client.open(other, pinned);
    assert_eq!(codes_and_severities(&client.diagnostics_for(other, 1)), []);

    // Back to the language's default: the bare file is clean, as `mcpc check` says.
    client.notify(
        "workspace/didChangeConfiguration",
        json!({ "settings": { "mcpolicy": { "protocol": null } } }),
    );
    let mut seen = std::collections::HashMap::new();
    while seen.len() < 2 {
        let published = client.diagnostics_for_any();
        seen.insert(
            published["uri"].as_str().unwrap().to_owned(),
            codes_and_severities(&published),
        );
    }
    assert_eq!(seen[URI], []);
    assert_eq!(seen[other], []);

    // An unknown revision is refused with the known ones named.
    client.notify(
        "workspace/didChangeConfiguration",
        json!({ "settings": { "protocol": "2024-01-01" } }),
    );
    loop {
        let message = client.recv_value();
        if message["method"] == "window/logMessage" {
            let text = message["params"]["message"].as_str().unwrap();
            assert!(
                text.contains("2025-06-18, 2025-11-25, 2026-07-28"),
                "{text}"
            );
            break;
        }
    }
    assert!(client.shutdown());
}

/// `initialize` with `capabilities`, then `initialized`.
fn initialize_with(client: &mut Client, capabilities: Value) {
    client.ok(
        "initialize",
        json!({ "processId": null, "rootUri": null, "capabilities": capabilities }),
    );
    client.notify("initialized", json!({}));
}

fn pull(client: &mut Client, previous: Option<&str>) -> Value {
    client.ok(
        "textDocument/diagnostic",
        json!({ "textDocument": { "uri": URI }, "previousResultId": previous }),
    )
}

fn configure(client: &mut Client, settings: Value) {
    client.notify(
        "workspace/didChangeConfiguration",
        json!({ "settings": { "mcpolicy": settings } }),
    );
}

/// The requests the server sent (messages with both a method and an id).
fn server_requests(messages: &[Value]) -> Vec<Value> {
    messages
        .iter()
        .filter(|m| m.get("method").is_some() && m.get("id").is_some())
        .cloned()
        .collect()
}

/// Waits for the server's next request, which must be a diagnostics
/// refresh; its id. Nothing is pushed to a client that pulls meanwhile.
fn refresh_request(client: &mut Client) -> RequestId {
    loop {
        let message = client.recv_value();
        assert_ne!(message["method"], "textDocument/publishDiagnostics");
        if message.get("method").is_some() && message.get("id").is_some() {
            assert_eq!(
                message["method"], "workspace/diagnostic/refresh",
                "{message}"
            );
            assert!(message["params"].is_null(), "{message}");
            return serde_json::from_value(message["id"].clone()).unwrap();
        }
    }
}

/// A pull made after the last message received, and the server requests
/// that came before its answer (the server handles messages in order, so
/// a refresh for a configuration sent earlier would be among them).
fn pull_noting_requests(client: &mut Client, previous: Option<&str>) -> (Value, Vec<Value>) {
    let mark = client.transcript.len();
    let report = pull(client, previous);
    (report, server_requests(&client.transcript[mark..]))
}

fn report_severities(report: &Value) -> Vec<(String, u64)> {
    report["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["code"].as_str().unwrap().to_owned(),
                d["severity"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// A pulling client that accepts refreshes is asked to pull again after a
/// setting took another value (each time with a fresh id), and never after
/// one that kept its value; the next pull is a full report under the new
/// settings, not `unchanged`. An error answer to the refresh is logged and
/// the session goes on.
#[test]
fn a_pulling_client_is_asked_to_pull_again_when_a_setting_changes() {
    let mut client = Client::stdio();
    initialize_with(
        &mut client,
        json!({
            "textDocument": { "diagnostic": { "dynamicRegistration": false } },
            "workspace": { "diagnostics": { "refreshSupport": true } },
        }),
    );
    client.open(URI, UNUSED);
    let first = pull(&mut client, None);
    assert_eq!(report_severities(&first), [("W0410".to_owned(), 2)]);
    let first_id = first["resultId"].as_str().unwrap().to_owned();

    configure(&mut client, json!({ "denyWarnings": true }));
    let refresh = refresh_request(&mut client);
    client.send(Message::Response(Response::new_ok(
        refresh.clone(),
        Value::Null,
    )));
    let denied = pull(&mut client, Some(&first_id));
    assert_eq!(denied["kind"], "full", "{denied}");
    assert_eq!(report_severities(&denied), [("W0410".to_owned(), 1)]);
    let denied_id = denied["resultId"].as_str().unwrap().to_owned();
    assert_ne!(denied_id, first_id);

    // The value it already has: nothing changed, no refresh, `unchanged`.
    configure(&mut client, json!({ "denyWarnings": true }));
    let (same, requests) = pull_noting_requests(&mut client, Some(&denied_id));
    assert_eq!(requests, Vec::<Value>::new());
    assert_eq!(same, json!({ "kind": "unchanged", "resultId": denied_id }));

    // A setting that takes another value but changes none of the findings
    // (the language's default revision, named) still gives another result
    // id: the id stands for the findings under these settings.
    configure(&mut client, json!({ "protocol": "2025-11-25" }));
    let second = refresh_request(&mut client);
    assert_ne!(second, refresh, "a refresh id used twice");
    client.send(Message::Response(Response::new_ok(
        second.clone(),
        Value::Null,
    )));
    let revised = pull(&mut client, Some(&denied_id));
    assert_eq!(revised["kind"], "full", "{revised}");
    assert_eq!(revised["items"], denied["items"]);
    let revised_id = revised["resultId"].as_str().unwrap().to_owned();
    assert_ne!(revised_id, denied_id);

    // Back to warnings; the client refuses the refresh: logged, no crash.
    configure(&mut client, json!({ "denyWarnings": null }));
    let third = refresh_request(&mut client);
    assert!(
        third != refresh && third != second,
        "a refresh id used twice"
    );
    client.send(Message::Response(Response::new_err(
        third,
        -32603,
        "refused by the test".to_owned(),
    )));
    loop {
        let message = client.recv_value();
        if message["method"] == "window/logMessage" {
            let text = message["params"]["message"].as_str().unwrap();
            assert!(text.contains("refused by the test"), "{text}");
            break;
        }
    }
    let warned = pull(&mut client, Some(&revised_id));
    assert_eq!(warned["kind"], "full", "{warned}");
    assert_eq!(report_severities(&warned), [("W0410".to_owned(), 2)]);
    assert!(
        !client.was_pushed_diagnostics(),
        "diagnostics pushed to a client that pulls"
    );
    assert!(client.shutdown());
}

/// A pulling client that did not declare `refreshSupport` is sent no
/// request, and its next pull is the new report all the same.
#[test]
fn a_pulling_client_without_refresh_support_is_sent_no_request() {
    let mut client = Client::stdio();
    initialize_with(
        &mut client,
        json!({ "textDocument": { "diagnostic": { "dynamicRegistration": false } } }),
    );
    client.open(URI, UNUSED);
    let first = pull(&mut client, None);
    let first_id = first["resultId"].as_str().unwrap().to_owned();
    configure(&mut client, json!({ "denyWarnings": true }));
    let (denied, requests) = pull_noting_requests(&mut client, Some(&first_id));
    assert_eq!(requests, Vec::<Value>::new());
    assert_eq!(denied["kind"], "full", "{denied}");
    assert_eq!(report_severities(&denied), [("W0410".to_owned(), 1)]);
    assert!(client.shutdown());
}

/// A client that is pushed diagnostics gets them again, and no refresh
/// request, even if it declared `refreshSupport`.
#[test]
fn a_pushed_client_gets_diagnostics_and_no_refresh_request() {
    let mut client = Client::stdio();
    initialize_with(
        &mut client,
        json!({ "workspace": { "diagnostics": { "refreshSupport": true } } }),
    );
    client.open(URI, UNUSED);
    let before = codes_and_severities(&client.diagnostics_for(URI, 1));
    assert_eq!(before, [("W0410".to_owned(), 2)]);
    let mark = client.transcript.len();
    configure(&mut client, json!({ "denyWarnings": true }));
    let denied = codes_and_severities(&client.diagnostics(URI));
    assert_eq!(denied, [("W0410".to_owned(), 1)]);
    // A request after the change: a refresh would have come before its answer.
    client.ok(
        "textDocument/diagnostic",
        json!({ "textDocument": { "uri": URI } }),
    );
    assert_eq!(
        server_requests(&client.transcript[mark..]),
        Vec::<Value>::new()
    );
    assert!(client.shutdown());
}

/// Each setting the server reads is a `mcpolicy.*` setting of the VS Code
/// extension, sent in its `initializationOptions`, and a row of the
/// README's "Settings" table; and the extension has no other (but the
/// server's path, which it keeps).
#[test]
fn the_extension_and_the_readme_name_every_setting() {
    let vscode = common::root().join("lsp/editors/vscode");
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(vscode.join("package.json")).unwrap())
            .unwrap();
    let contributed: Vec<&str> = manifest["contributes"]["configuration"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.strip_prefix("mcpolicy.").unwrap())
        .filter(|k| *k != "server.path")
        .collect();
    let mut names = mcpolicy_lsp::settings::NAMES.to_vec();
    names.sort_unstable();
    let mut sorted = contributed.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, names, "package.json's settings");
    let extension = std::fs::read_to_string(vscode.join("src/extension.ts")).unwrap();
    let readme = std::fs::read_to_string(common::root().join("lsp/README.md")).unwrap();
    let settings = readme
        .split("\n## ")
        .find(|s| s.starts_with("Settings\n"))
        .unwrap();
    for name in names {
        assert!(
            extension.contains(&format!("{name}: configuration.get")),
            "extension.ts does not send `{name}` at start"
        );
        assert!(
            settings.contains(&format!("\n| `{name}` |")),
            "lsp/README.md's Settings table has no `{name}`"
        );
    }
}
