//! `check --fix` as properties over random policies made of lines that
//! carry certain fixes (typos, missing units, a missing version line, wrong
//! codes, stale suppressions) and lines that do not:
//! - after fixing, no finding with a fix is left;
//! - fixing twice gives what fixing once gives;
//! - the fixes applied together never touch the same bytes;
//! - what `check --fix` writes passes `fmt --check` (whenever `fmt` can
//!   read it), here and over every file of `tests/cases/check/`.

use mcpolicy_compiler::check::fix::{apply, compatible, fix_all, fix_and_format};
use mcpolicy_compiler::codes::Code;
use mcpolicy_compiler::db::analyze_parsed;
use mcpolicy_compiler::diagnostic::{Diagnostic, Fix};
use mcpolicy_compiler::format;
use mcpolicy_compiler::parse::parse;
use mcpolicy_compiler::syntax::Span;
use proptest::prelude::*;
use proptest::test_runner::Config;

fn config() -> Config {
    Config {
        // Fast by default; PROPTEST_CASES raises it for the long mode.
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(64),
        ..Config::default()
    }
}

fn findings(text: &str) -> Vec<Diagnostic> {
    analyze_parsed(&parse(text)).diagnostics
}

fn policy() -> impl Strategy<Value = String> {
    let version = prop::sample::select(vec!["mcpolicy 1\n", "", "mcpolicy 2\n"]);
    let statement = prop::sample::select(vec![
        "max_token 5",
        "max_tokens 5",
        "samplng on",
        "max_input 64",
        "max_input 65536",
        "deadline 2 weeks",
        "rate 20 per minute",
        "budget 10 requests per 1w",
        "models claude-*, o3",
        "deadline 60 s",
        "max_context thisserver",
        "consent alway",
        "tools off as acme.of",
        "max_tokens 1  # mcpolicy: allow W0305",
        "max_tokens 1  # mcpolicy: allow W041",
    ]);
    let item = prop::sample::select(vec![
        "protocol 2025-11-2",
        "reason user.denied { code -32010 }",
        "reason acme.off { retryable false; ttl forever }",
        "error_code -32600",
        "server \"a*\" { max_tokens 1 }",
        "server \"*b\" { max_tokens 1 }  # mcpolicy: allow W0305",
        "server \"c\" { max_tokens 1 }  # mcpolicy: allow W0305",
        "identity messages, systemPromt",
    ]);
    (
        version,
        prop::collection::vec(statement, 0..6),
        prop::collection::vec(item, 0..5),
    )
        .prop_map(|(version, statements, items)| {
            let mut text = version.to_owned();
            text.push_str("defaults {\n");
            let mut seen = std::collections::HashSet::new();
            for s in statements {
                // One of each: duplicates are a different (unfixable) finding.
                if seen.insert(s.split_whitespace().next().unwrap_or_default().to_owned()) {
                    text.push_str(&format!("  {s}\n"));
                }
            }
            text.push_str("}\n");
            let mut seen = std::collections::HashSet::new();
            for i in items {
                if seen.insert(i) {
                    text.push_str(i);
                    text.push('\n');
                }
            }
            text
        })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn no_fixable_finding_is_left_and_fixing_is_idempotent(text in policy()) {
        let once = fix_all(&text, findings);
        let left: Vec<Diagnostic> = findings(&once.text).into_iter().filter(|d| d.fix.is_some()).collect();
        prop_assert!(left.is_empty(), "{}\n{left:#?}", once.text);
        let twice = fix_all(&once.text, findings);
        prop_assert_eq!(&twice.text, &once.text);
        prop_assert!(twice.applied.is_empty());
        // Fixing never adds an error.
        let errors = |t: &str| findings(t).iter().filter(|d| d.severity() == mcpolicy_compiler::codes::Severity::Error).count();
        prop_assert!(errors(&once.text) <= errors(&text), "{}", once.text);
    }

    /// What `check --fix` writes is formatted, and means what the fixed
    /// text means.
    #[test]
    fn fixed_files_are_written_formatted(text in policy()) {
        let written = fix_and_format(&text, findings);
        let fixed = fix_all(&text, findings);
        prop_assert_eq!(&written.applied, &fixed.applied);
        if !written.applied.is_empty() && format::format(&fixed.text).is_ok() {
            prop_assert_eq!(format::is_formatted(&written.text).ok(), Some(true), "{}", written.text);
        }
    }

    /// Random fixes over a text: the ones chosen together are disjoint and
    /// in order, and `apply` splices exactly them.
    #[test]
    fn compatible_fixes_never_overlap(edits in prop::collection::vec((0usize..40, 0usize..6, "[a-z]{0,3}"), 0..12)) {
        let text = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG";
        let diagnostics: Vec<Diagnostic> = edits
            .iter()
            .map(|(start, len, replacement)| {
                let span = Span::new(*start, (*start + *len).min(text.len()));
                Diagnostic::new(Code::E0101, span, "m", "l").fix("t", span, replacement.clone())
            })
            .collect();
        let chosen: Vec<&Fix> = compatible(&diagnostics);
        for pair in chosen.windows(2) {
            prop_assert!(pair[0].span.end <= pair[1].span.start && pair[0].span.start < pair[1].span.start);
        }
        let applied = apply(text, &chosen).expect("in range");
        let removed: usize = chosen.iter().map(|f| f.span.len()).sum();
        let added: usize = chosen.iter().map(|f| f.replacement.len()).sum();
        prop_assert_eq!(applied.len(), text.len() - removed + added);
    }
}

/// Every check case with a fix: `check --fix` then `fmt --check` passes
/// (the files `fmt` cannot read, with syntax errors left, excepted).
#[test]
fn fmt_check_passes_after_fix_on_every_check_case() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/cases/check");
    let mut fixed_and_formatted = 0;
    for entry in std::fs::read_dir(&dir).expect("tests/cases/check") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "mcpolicy") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let written = fix_and_format(&text, findings);
        if written.applied.is_empty() {
            assert_eq!(written.text, text, "{}", path.display());
            continue;
        }
        if let Ok(formatted) = format::is_formatted(&written.text) {
            assert!(
                formatted,
                "{} is not formatted after --fix:\n{}",
                path.display(),
                written.text
            );
            fixed_and_formatted += 1;
        }
    }
    assert!(fixed_and_formatted > 0, "no case exercised the layout");
}
