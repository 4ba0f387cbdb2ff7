//! Data-driven feature cases: each `tests/cases/lsp/features/*.mcpolicy`
//! marks a cursor with `$0`; the server's hover, completion and definition
//! there are snapshotted next to it (`INSTA_UPDATE=always` or `cargo insta
//! review` to regenerate).

#![allow(clippy::unwrap_used)]

mod common;

use common::{Client, URI, position};
use serde_json::json;

#[test]
fn feature_cases() {
    let mut client = Client::memory();
    client.initialize(&["utf-16"]);
    let mut version = 1;
    insta::glob!("../../tests/cases/lsp/features", "*.mcpolicy", |path| {
        let marked = std::fs::read_to_string(path).unwrap();
        let cursor = marked.find("$0").expect("a `$0` cursor marker");
        let text = marked.replacen("$0", "", 1);
        if version == 1 {
            client.open(URI, &text);
        } else {
            client.change(URI, version, json!([{ "text": text }]));
        }
        client.diagnostics_for(URI, version);
        version += 1;
        let at = json!({ "textDocument": { "uri": URI }, "position": position(&text, cursor) });
        let hover = client.ok("textDocument/hover", at.clone());
        let completion = client.ok("textDocument/completion", at.clone());
        let labels: Vec<String> = completion
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|i| {
                        format!(
                            "{} → {}",
                            i["label"].as_str().unwrap(),
                            i["textEdit"]["newText"].as_str().unwrap()
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let definition = client.ok("textDocument/definition", at);
        let report = json!({
            "hover": hover.get("contents").map(|c| c["value"].clone()),
            "hover_range": hover.get("range"),
            "completion": labels,
            "definition": definition,
        });
        insta::with_settings!({ snapshot_path => "../../tests/cases/lsp/snapshots", prepend_module_to_snapshot => false }, {
            insta::assert_json_snapshot!(report);
        });
    });
    assert!(client.shutdown());
}
