//! The settings of `lsp/README.md` ("Settings") over stdio: sent in
//! `initializationOptions` or `workspace/didChangeConfiguration`, they change
//! what is published, and every open document is published again.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Client, URI};
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
