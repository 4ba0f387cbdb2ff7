//! Inline suppressions (`# mcpolicy: allow CODE`), as properties over
//! random policies made of lines that do and do not draw warnings:
//! - allowing every warning on its own line leaves no warning and no W0701,
//!   and every error stays;
//! - allowing a code that is not reported on a line draws one W0701 there
//!   and changes nothing else;
//! - `fmt` keeps what is suppressed: the findings of a formatted policy are
//!   the findings of the policy.

use mcpolicy_compiler::codes::{Code, Severity};
use mcpolicy_compiler::db::analyze_parsed;
use mcpolicy_compiler::diagnostic::Diagnostic;
use mcpolicy_compiler::format::format;
use mcpolicy_compiler::parse::parse;
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

/// A top-level line; `{i}` makes names unique.
fn lines() -> impl Strategy<Value = Vec<String>> {
    let line = prop::sample::select(vec![
        "server \"g{i}-*\" { max_tokens 1 }",
        "server \"*-{i}\" { max_tokens 1 }",
        "server \"*-{i}-*\" { sampling off }",
        "reason acme.r{i} { retryable false; ttl forever }",
        "reason acme.q{i} { ttl forever }",
        "server \"e{i}\" { max_tokens 1 }",
        "server \"bad{i}\" { max_tokens 1; max_tokens 2 }",
        "defaults { max_tokens 1 }",
    ]);
    prop::collection::vec(line, 1..8).prop_map(|chosen| {
        let mut seen_defaults = false;
        chosen
            .iter()
            .enumerate()
            .filter(|(_, l)| {
                let defaults = l.starts_with("defaults");
                let keep = !(defaults && seen_defaults);
                seen_defaults |= defaults;
                keep
            })
            .map(|(i, l)| l.replace("{i}", &i.to_string()))
            .collect()
    })
}

fn policy(lines: &[String]) -> String {
    format!("mcpolicy 1\n{}\n", lines.join("\n"))
}

/// The 0-based line of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count()
}

fn codes(findings: &[Diagnostic]) -> Vec<Code> {
    let mut codes: Vec<Code> = findings.iter().map(|d| d.code).collect();
    codes.sort();
    codes
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn allowing_each_warning_on_its_line_silences_exactly_it(lines in lines()) {
        let text = policy(&lines);
        let before = findings(&text);
        // The warnings of each line (the version line is line 0).
        let mut allowed: Vec<Vec<Code>> = vec![Vec::new(); lines.len()];
        for d in &before {
            if d.severity() == Severity::Warning {
                let line = line_of(&text, d.span.start);
                prop_assert!(line >= 1, "{d:?}");
                if !allowed[line - 1].contains(&d.code) {
                    allowed[line - 1].push(d.code);
                }
            }
        }
        let suppressed: Vec<String> = lines
            .iter()
            .zip(&allowed)
            .map(|(line, codes)| {
                if codes.is_empty() {
                    line.clone()
                } else {
                    let list: Vec<&str> = codes.iter().map(|c| c.as_str()).collect();
                    format!("{line}  # mcpolicy: allow {}", list.join(", "))
                }
            })
            .collect();
        let after = findings(&policy(&suppressed));
        prop_assert!(after.iter().all(|d| d.severity() == Severity::Error), "{after:#?}");
        let errors = |f: &[Diagnostic]| codes(&f.iter().filter(|d| d.severity() == Severity::Error).cloned().collect::<Vec<_>>());
        prop_assert_eq!(errors(&before), errors(&after));
    }

    #[test]
    fn allowing_an_absent_warning_draws_w0701(lines in lines(), pick in any::<prop::sample::Index>(), code in prop::sample::select(vec![Code::W0305, Code::W0410, Code::W0408, Code::W0604])) {
        let text = policy(&lines);
        let before = findings(&text);
        let target = pick.index(lines.len());
        let on_line = before.iter().any(|d| d.code == code && line_of(&text, d.span.start) == target + 1);
        prop_assume!(!on_line);
        let mut edited = lines.clone();
        edited[target] = format!("{}  # mcpolicy: allow {code}", edited[target]);
        let after = findings(&policy(&edited));
        let mut expected = codes(&before);
        expected.push(Code::W0701);
        expected.sort();
        prop_assert_eq!(codes(&after), expected);
    }

    #[test]
    fn fmt_keeps_what_is_suppressed(lines in lines(), allow in prop::collection::vec(prop::sample::select(vec!["", "W0305", "W0410", "W0408, W0410"]), 8)) {
        let edited: Vec<String> = lines
            .iter()
            .zip(&allow)
            .map(|(line, allow)| if allow.is_empty() { line.clone() } else { format!("{line}  # mcpolicy: allow {allow}") })
            .collect();
        let text = policy(&edited);
        let before = findings(&text);
        prop_assume!(before.iter().all(|d| d.severity() == Severity::Warning));
        let formatted = format(&text).expect("formats");
        prop_assert_eq!(codes(&findings(&formatted)), codes(&before), "{}", formatted);
    }
}
