//! `docs/codes.md` is generated from `compiler/src/codes.rs` and kept equal
//! to it here (`UPDATE_EXPECT=1` rewrites it); every diagnostic the server
//! publishes links to its code's section of that page.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Client, URI, root};
use mcpolicy_compiler::codes::Code;
use mcpolicy_compiler::ide::docs::codes_markdown;

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

/// Over stdio: each finding's `codeDescription.href` is the repository's
/// `docs/codes.md` at its code's anchor; an unused reason (W0410) is tagged
/// `Unnecessary` (1) and a finding that is not about dead text has no tag.
#[test]
fn published_diagnostics_link_to_their_code_and_tag_dead_text() {
    let mut client = Client::stdio();
    client.initialize(&["utf-8"]);
    let text = "mcpolicy 1\nreason acme.unused { retryable false; ttl forever }\n\
                server \"a\" { max_tokns 5 }\n";
    client.open(URI, text);
    let published = client.diagnostics_for(URI, 1);
    let diagnostics = published["diagnostics"].as_array().unwrap();
    let repository = env!("CARGO_PKG_REPOSITORY");
    assert_eq!(repository, "https://example.invalid/mcpolicy");
    let mut seen = Vec::new();
    for d in diagnostics {
        let code = d["code"].as_str().unwrap();
        assert_eq!(
            d["codeDescription"]["href"],
            format!(
                "{repository}/blob/main/docs/codes.md#{}",
                code.to_lowercase()
            ),
            "{d:#}"
        );
        seen.push((code.to_owned(), d.get("tags").cloned()));
    }
    let tags = |code: &str| {
        seen.iter()
            .find(|(c, _)| c == code)
            .unwrap_or_else(|| panic!("no {code} in {seen:?}"))
            .1
            .clone()
    };
    assert_eq!(tags("W0410"), Some(serde_json::json!([1])));
    assert_eq!(tags("E0101"), None);
    // The anchors the links name exist in the committed page.
    let page = std::fs::read_to_string(root().join("docs/codes.md")).unwrap();
    for (code, _) in &seen {
        assert!(page.contains(&format!("<a id=\"{}\"></a>", code.to_lowercase())));
    }
    assert!(client.shutdown());
}
