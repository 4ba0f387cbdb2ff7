//! `docs/codes.md` is generated from `compiler/src/codes.rs` and kept equal
//! to it here (`UPDATE_EXPECT=1` rewrites it); every diagnostic the server
//! publishes links to its code's section of that page, at the URL the
//! `codeDocsUrl` setting names.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Client, URI, root};
use mcpolicy_compiler::codes::Code;
use mcpolicy_compiler::ide::docs::codes_markdown;
use serde_json::{Value, json};

#[test]
fn docs_codes_md_is_generated_from_codes_rs() {
    let path = root().join("docs/codes.md");
    let expected = codes_markdown();
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(&path, &expected).unwrap();
    }
    let actual = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        actual == expected,
        "docs/codes.md is out of date with compiler/src/codes.rs; \
         regenerate it: UPDATE_EXPECT=1 cargo test -p mcpolicy-lsp --test code_docs"
    );
}

/// Each section holds exactly what `mcpc explain CODE` prints (its format
/// is `cli/src/explain.rs`'s), under an explicit anchor.
#[test]
fn every_code_has_a_section_with_its_explanation() {
    let page = codes_markdown();
    for code in Code::ALL {
        let anchor = format!(
            "<a id=\"{}\"></a>\n\n## {code}\n",
            code.as_str().to_lowercase()
        );
        let at = page
            .find(&anchor)
            .unwrap_or_else(|| panic!("no section for {code}"));
        let explain = format!(
            "{code} ({}): {}\n\n{}\n",
            code.severity().as_str(),
            code.summary(),
            code.explanation()
        );
        assert!(
            page[at..].starts_with(&format!("{anchor}\n```text\n{explain}```\n")),
            "{code}'s section is not `mcpc explain {code}`"
        );
    }
}

/// Over stdio: with no page named (the default: the project has no
/// published home for `docs/codes.md`), a finding carries no
/// `codeDescription` at all, never a link to a guessed address; an unused
/// reason (W0410) is tagged `Unnecessary` (1) and a finding that is not
/// about dead text has no tag.
#[test]
fn published_diagnostics_tag_dead_text_and_link_nowhere_by_default() {
    let mut client = Client::stdio();
    client.initialize(&["utf-8"]);
    client.open(URI, FINDINGS);
    let published = client.diagnostics_for(URI, 1);
    let diagnostics = published["diagnostics"].as_array().unwrap();
    let mut seen = Vec::new();
    for d in diagnostics {
        let code = d["code"].as_str().unwrap();
        // Unless the build names a page (`MCPOLICY_CODE_DOCS_URL`).
        let expected = mcpolicy_lsp::code_docs::DEFAULT_PAGE
            .map(|page| json!({ "href": format!("{page}#{}", code.to_lowercase()) }));
        assert_eq!(d.get("codeDescription").cloned(), expected, "{d:#}");
        seen.push((code.to_owned(), d.get("tags").cloned()));
    }
    let tags = |code: &str| {
        seen.iter()
            .find(|(c, _)| c == code)
            .unwrap_or_else(|| panic!("no {code} in {seen:?}"))
            .1
            .clone()
    };
    assert_eq!(tags("W0410"), Some(json!([1])));
    assert_eq!(tags("E0101"), None);
    assert!(client.shutdown());
}

/// With a page named, each finding's `codeDescription.href` is that page at
/// its code's anchor, and the anchors exist in the committed
/// `docs/codes.md`.
#[test]
fn a_named_page_links_each_finding_to_its_code_anchor() {
    let page = "file:///usr/share/doc/mcpolicy/codes.html";
    let mut client = initialized_with(json!({ "codeDocsUrl": page }));
    client.open(URI, FINDINGS);
    let published = links(&client.diagnostics_for(URI, 1));
    assert!(all_into(&published, Some(page)), "{published:?}");
    let committed = std::fs::read_to_string(root().join("docs/codes.md")).unwrap();
    for (code, _) in &published {
        assert!(committed.contains(&format!("<a id=\"{}\"></a>", code.to_lowercase())));
    }
    assert!(client.shutdown());
}

const FINDINGS: &str = "mcpolicy 1\nreason acme.unused { retryable false; ttl forever }\n\
                        server \"a\" { max_tokns 5 }\n";

/// Each diagnostic's link, with its code (`None`: no `codeDescription`).
fn links(published: &Value) -> Vec<(String, Option<String>)> {
    let diagnostics = published["diagnostics"].as_array().unwrap();
    assert!(!diagnostics.is_empty(), "{published}");
    diagnostics
        .iter()
        .map(|d| {
            let href = d
                .get("codeDescription")
                .map(|description| description["href"].as_str().unwrap().to_owned());
            (d["code"].as_str().unwrap().to_owned(), href)
        })
        .collect()
}

/// Whether every link is `page` at its code's anchor (`None`: no link).
fn all_into(links: &[(String, Option<String>)], page: Option<&str>) -> bool {
    links
        .iter()
        .all(|(code, href)| *href == page.map(|page| format!("{page}#{}", code.to_lowercase())))
}

/// Waits for a log line and returns it; nothing is published before it.
fn log_line(client: &mut Client) -> String {
    loop {
        let message = client.recv_value();
        assert_ne!(message["method"], "textDocument/publishDiagnostics");
        if message["method"] == "window/logMessage" {
            return message["params"]["message"].as_str().unwrap().to_owned();
        }
    }
}

/// A server over stdio, initialised with `options` and no capabilities.
fn initialized_with(options: Value) -> Client {
    let mut client = Client::stdio();
    client.ok(
        "initialize",
        json!({
            "processId": null,
            "rootUri": null,
            "capabilities": {},
            "initializationOptions": options,
        }),
    );
    client.notify("initialized", json!({}));
    client
}

/// `codeDocsUrl` in `initializationOptions` and in
/// `workspace/didChangeConfiguration` changes the links of the next
/// diagnostics; `null` restores the default (no links, unless the build
/// names a page).
#[test]
fn the_code_docs_url_setting_changes_the_links() {
    let first = "https://docs.example.org/mcpolicy/codes.html";
    let second = "file:///usr/share/doc/mcpolicy/codes.html";
    let mut client = initialized_with(json!({ "mcpolicy": { "codeDocsUrl": first } }));
    client.open(URI, FINDINGS);
    let published = links(&client.diagnostics_for(URI, 1));
    assert!(all_into(&published, Some(first)), "{published:?}");

    client.notify(
        "workspace/didChangeConfiguration",
        json!({ "settings": { "codeDocsUrl": second } }),
    );
    let published = links(&client.diagnostics(URI));
    assert!(all_into(&published, Some(second)), "{published:?}");

    client.notify(
        "workspace/didChangeConfiguration",
        json!({ "settings": { "mcpolicy": { "codeDocsUrl": null } } }),
    );
    let published = links(&client.diagnostics(URI));
    assert!(
        all_into(&published, mcpolicy_lsp::code_docs::DEFAULT_PAGE),
        "{published:?}"
    );
    assert!(client.shutdown());
}

/// A `codeDocsUrl` that is not an absolute URL of a page is logged, naming
/// the setting, and changes nothing: the next diagnostics keep the links
/// they had.
#[test]
fn an_invalid_code_docs_url_is_logged_and_changes_nothing() {
    let page = "https://docs.example.org/mcpolicy/codes.html";
    let mut client = initialized_with(json!({ "codeDocsUrl": "codes.html" }));
    let line = log_line(&mut client);
    assert!(
        line.contains("initializationOptions") && line.contains("`codeDocsUrl`"),
        "{line}"
    );
    client.open(URI, FINDINGS);
    let published = links(&client.diagnostics_for(URI, 1));
    assert!(
        all_into(&published, mcpolicy_lsp::code_docs::DEFAULT_PAGE),
        "{published:?}"
    );

    client.notify(
        "workspace/didChangeConfiguration",
        json!({ "settings": { "codeDocsUrl": page } }),
    );
    assert!(all_into(&links(&client.diagnostics(URI)), Some(page)));

    let mut version = 1;
    for bad in [
        json!("not a url"),
        json!("docs/codes.md"),
        json!(format!("{page}#top")),
        json!(42),
    ] {
        client.notify(
            "workspace/didChangeConfiguration",
            json!({ "settings": { "mcpolicy": { "codeDocsUrl": bad } } }),
        );
        let line = log_line(&mut client);
        assert!(line.contains("`codeDocsUrl`"), "{line}");
        // The next diagnostics, for an edit, keep the page.
        version += 1;
        client.change(
            URI,
            version,
            json!([{ "text": format!("{FINDINGS}# v{version}\n") }]),
        );
        let published = links(&client.diagnostics_for(URI, version));
        assert!(all_into(&published, Some(page)), "{bad}: {published:?}");
    }
    assert!(client.shutdown());
}
