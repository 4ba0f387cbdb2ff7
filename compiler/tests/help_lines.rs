//! Help lines say what to write, and what they say means what the user
//! wrote: a suggested size is exactly the bytes written, a suggested duration
//! exactly the time written. Each property checks the suggestion by writing
//! it back into the policy and comparing the checker's model with the one of
//! a spelling whose meaning is plain.

use mcpolicy_compiler::check::Analysis;
use mcpolicy_compiler::codes::Code;
use mcpolicy_compiler::db::analyze_parsed;
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

fn analyze(text: &str) -> Analysis {
    analyze_parsed(&parse(text))
}

fn policy(statement: &str) -> String {
    format!("mcpolicy 1\ndefaults {{\n  {statement}\n}}\n")
}

/// The backticked spans of a help line, in order.
fn quoted(help: &str) -> Vec<&str> {
    help.split('`').skip(1).step_by(2).collect()
}

/// The one finding of `statement` in a defaults block, with its help.
fn only_finding(statement: &str) -> (Code, String) {
    let analysis = analyze(&policy(statement));
    assert_eq!(
        analysis.diagnostics.len(),
        1,
        "{statement}: {:#?}",
        analysis.diagnostics
    );
    let d = &analysis.diagnostics[0];
    (d.code, d.help.clone().unwrap_or_default())
}

/// Checks `statement` clean and returns its model.
fn clean_model(statement: &str) -> mcpolicy_compiler::model::PolicyModel {
    let analysis = analyze(&policy(statement));
    assert!(
        analysis.diagnostics.is_empty(),
        "{statement}: {:#?}",
        analysis.diagnostics
    );
    analysis.model
}

proptest! {
    #![proptest_config(config())]

    /// `max_input N` (no unit): every size the help suggests is N bytes
    /// exactly; the first is in the largest unit that states N exactly.
    #[test]
    fn size_without_unit_suggests_the_same_bytes(n in prop_oneof![
        1u64..100_000,
        (1u64..4096).prop_map(|k| k << 10),
        (1u64..64).prop_map(|k| k << 20),
        (1u64..8).prop_map(|k| k << 30),
    ]) {
        let (code, help) = only_finding(&format!("max_input {n}"));
        prop_assert_eq!(code, Code::E0103);
        let bytes = clean_model(&format!("max_input {n} B"));
        let suggestions: Vec<&str> = quoted(&help)
            .into_iter()
            .filter(|s| s.starts_with(|c: char| c.is_ascii_digit()))
            .collect();
        prop_assert!(!suggestions.is_empty(), "{help}");
        // The first suggestion is the bytes as written, and never a bigger
        // unit glued to the number (`65536 KiB`) unless it is said to be so.
        let first = clean_model(&format!("max_input {}", suggestions[0]));
        prop_assert_eq!(&first, &bytes, "{}", help);
        if n >= 1024 {
            for s in &suggestions {
                prop_assert_eq!(&clean_model(&format!("max_input {s}")), &bytes, "{}", help);
            }
        }
    }

    /// A duration in weeks (`1w`, `3 weeks`): the suggested duration, and
    /// the fix, are the same length of time.
    #[test]
    fn weeks_suggest_the_same_duration(n in 1u64..500, spelling in prop::sample::select(vec!["w", "wk", " week", " weeks", "weeks"])) {
        for template in ["deadline {}", "budget 10 requests per {}", "rate 10 per {}"] {
            let written = format!("{n}{spelling}");
            let statement = template.replace("{}", &written);
            let (code, help) = only_finding(&statement);
            prop_assert_eq!(code, Code::E0104, "{}", statement);
            let suggestion = quoted(&help)[0];
            let expected = template.replace("{}", &format!("{}s", n * 7 * 86_400));
            prop_assert_eq!(
                clean_model(&template.replace("{}", suggestion)),
                clean_model(&expected),
                "{} -> {}", statement, help
            );
        }
    }

    /// A unit word where a duration belongs (`rate 20 per minute`): the help
    /// is the user's statement with one of that unit, and it checks clean.
    #[test]
    fn unit_word_suggests_one_of_it(count in 1u64..10_000, word in prop::sample::select(vec![
        ("second", 1u64), ("seconds", 1), ("sec", 1), ("minute", 60), ("minutes", 60), ("min", 60),
        ("hour", 3600), ("hours", 3600), ("day", 86_400), ("days", 86_400), ("week", 604_800),
    ])) {
        let (unit, seconds) = word;
        let statement = format!("rate {count} per {unit}");
        let (code, help) = only_finding(&statement);
        prop_assert_eq!(code, Code::E0103);
        let rewritten = quoted(&help)[0];
        prop_assert!(rewritten.starts_with(&format!("rate {count} per ")), "{}", help);
        prop_assert_eq!(clean_model(rewritten), clean_model(&format!("rate {count} per {seconds}s")));
    }

    /// Unquoted model names and globs: the help quotes each one whole (the
    /// `*` kept), and the quoted statement checks clean.
    #[test]
    fn unquoted_models_are_quoted_whole(names in prop::collection::vec("[a-z][a-z0-9.-]{0,8}\\*?", 1..4)) {
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        prop_assume!(unique.len() == names.len());
        let statement = format!("models {}", names.join(", "));
        let (code, help) = only_finding(&statement);
        prop_assert_eq!(code, Code::E0103);
        let expected: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
        let expected = format!("models {}", expected.join(", "));
        prop_assert_eq!(quoted(&help)[0], expected.as_str());
        clean_model(&expected);
    }

    /// A negative number is called negative, never "zero".
    #[test]
    fn negative_numbers_are_called_negative(n in 1u64..1_000_000, template in prop::sample::select(vec![
        "budget -{} requests per day", "budget -{}", "rate -{} per 1m", "max_tokens -{}", "deadline -{}s",
    ])) {
        let statement = template.replace("{}", &n.to_string());
        let (code, help) = only_finding(&statement);
        prop_assert_eq!(code, Code::E0105);
        prop_assert!(!help.contains("zero refuses"), "{}", help);
        let analysis = analyze(&policy(&statement));
        prop_assert!(analysis.diagnostics[0].message.contains("negative"));
    }
}

#[test]
fn one_week_window_offers_the_calendar_week() {
    let (_, help) = only_finding("budget 100 tokens per 1w");
    assert_eq!(quoted(&help)[..2], ["7d", "week"]);
}
