//! `retry_alert`, the statement of the alert thresholds
//! (`docs/spec/language.md`, "Statements"): read, checked, formatted,
//! inherited, lowered, and left out of the digest.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use mcpolicy_compiler::db::{Database, SourceText, diagnostics, lower_file};
use mcpolicy_compiler::format::format;
use mcpolicy_runtime::table::{RetryAlert, Table};

fn compile(text: &str) -> Table {
    let db = Database::default();
    let source = SourceText::new(&db, "p.mcpolicy".into(), text.into());
    lower_file(&db, source)
        .clone()
        .expect("the policy compiles")
}

fn codes(text: &str) -> Vec<String> {
    let db = Database::default();
    let source = SourceText::new(&db, "p.mcpolicy".into(), text.into());
    diagnostics(&db, source)
        .iter()
        .map(|d| d.code.as_str().to_owned())
        .collect()
}

const BASE: &str = "mcpolicy 1\n\ndefaults {\n  sampling off\n}\n\nserver \"a\" {\n  max_tokens 100\n}\n\nserver \"b\" {\n  consent never\n}\n";

#[test]
fn it_is_lowered_inherited_and_kept_out_of_the_digest() {
    let plain = compile(BASE);
    // `a` inherits the defaults' setting, `b` overrides it.
    let with = compile(
        &BASE
            .replace(
                "  sampling off\n",
                "  sampling off\n  retry_alert 5 per 1m\n",
            )
            .replace(
                "  consent never\n",
                "  consent never\n  retry_alert 2 per 30s\n",
            ),
    );
    assert_eq!(
        with.servers[0].block.retry_alert,
        Some(RetryAlert {
            count: 5,
            window_ms: 60_000
        })
    );
    assert_eq!(
        with.servers[1].block.retry_alert,
        Some(RetryAlert {
            count: 2,
            window_ms: 30_000
        })
    );
    assert!(plain.servers[0].block.retry_alert.is_none());
    // The digests do not move: stored decisions survive a threshold edit.
    for (p, w) in plain.servers.iter().zip(&with.servers) {
        assert_eq!(p.digest, w.digest);
    }
    assert_eq!(plain.fallback.digest, with.fallback.digest);
    // Without the statement, the table has no `retry_alert` member at all.
    assert!(!plain.to_json().contains("retry_alert"));
    assert!(with.to_json().contains("\"retry_alert\""));
}

#[test]
fn it_is_checked_and_formatted() {
    let text = BASE.replace(
        "  max_tokens 100\n",
        "  max_tokens 100\n  retry_alert   40 per 10m\n",
    );
    assert!(codes(&text).is_empty(), "{:?}", codes(&text));
    // It watches the refusals of `sampling off`: no "has no effect" there.
    let off = "mcpolicy 1\n\nserver \"a\" {\n  sampling off\n  retry_alert 3 per 10m\n}\n";
    assert!(codes(off).is_empty(), "{:?}", codes(off));
    let formatted = format(&text).unwrap();
    assert!(
        formatted.contains("\n  retry_alert 40 per 10m\n"),
        "{formatted}"
    );
    // Zero, a missing window, a reason and a repeat are findings.
    for (bad, code) in [
        ("retry_alert 0 per 10m", "E0105"),
        ("retry_alert 40", "E0103"),
        ("retry_alert 40 per 10m as acme.x", "E0002"),
        ("retry_alert 4 per 1m\n  retry_alert 5 per 1m", "E0106"),
    ] {
        let text = BASE.replace(
            "  max_tokens 100\n",
            &format!("  max_tokens 100\n  {bad}\n"),
        );
        let found = codes(&text);
        assert!(found.iter().any(|c| c == code), "{bad}: {found:?}");
    }
}
