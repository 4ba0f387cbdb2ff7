//! A certain fix never changes what the policy means
//! (`docs/spec/language.md`, "Fixes"), as a property over random
//! misspellings of every word the language declares.
//!
//! The vocabulary is read from the compiler's declarations, not listed
//! here: each statement's and each reason property's example
//! (`statements::Statement::ALL`, `REASON_PROPERTIES`) placed in one policy
//! with every top-level item, and each word of it classified by the
//! declaration it comes from (keywords, a statement's values, metrics,
//! calendar windows, units, revisions, identity fields). A value is then
//! replaced by each of its alternatives, so a new value or statement is
//! covered without touching this file.
//!
//! For one misspelling (an edit, a transposition, a change of case, a
//! plural or suffix added or dropped) of one word of a policy that compiles:
//! - a correction between a statement's values is certain only when the
//!   misspelling is the value in another case (`sampling no` is not
//!   `sampling on`, whatever the edit distance says);
//! - when a certain fix was applied and the result compiles, its table is
//!   the original's: a refusing statement still refuses, a window keeps its
//!   kind, a unit its scale.

use mcpolicy_compiler::check::IDENTITY_FIELDS;
use mcpolicy_compiler::check::fix::fix_all;
use mcpolicy_compiler::db::{Database, SourceText, analyze_parsed, lower_file};
use mcpolicy_compiler::diagnostic::Diagnostic;
use mcpolicy_compiler::parse::parse;
use mcpolicy_compiler::statements::{
    self, CALENDAR_UNITS, CONNECTIVES, COUNT_SUFFIXES, DURATION_UNITS, METRICS, REASON_PROPERTIES,
    SIZE_UNITS, Shape, Statement,
};
use mcpolicy_runtime::table::ProtocolRevision;
use proptest::prelude::*;
use proptest::test_runner::Config;

fn config() -> Config {
    Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(512),
        ..Config::default()
    }
}

fn findings(text: &str) -> Vec<Diagnostic> {
    analyze_parsed(&parse(text)).diagnostics
}

fn table_of(text: &str) -> Option<String> {
    let db = Database::default();
    let source = SourceText::new(&db, String::new(), text.to_owned());
    lower_file(&db, source).as_ref().map(|t| t.to_json())
}

/// A policy with every top-level item, one statement and one reason
/// property.
fn policy(statement: &str, property: &str) -> String {
    format!(
        "mcpolicy 1\nprotocol 2025-11-25\nerror_code -32011\nidentity systemPrompt, messages\n\
         reason policy.budget_exhausted {{\n  {property}\n}}\ndefaults {{\n  {statement}\n}}\n\
         server \"s\" {{\n  max_tokens 5\n}}\n"
    )
}

/// Where a word comes from, and so what may replace it.
#[derive(Debug, Clone, PartialEq)]
enum Class {
    /// A keyword, a connective or an identity field: misspelt, never replaced.
    Name,
    /// A revision: any other revision is a valid original too.
    Revision(Vec<&'static str>),
    /// One of a statement's or a property's values.
    Values(Vec<&'static str>),
    /// A unit or suffix of a quantity.
    Units(&'static [&'static str]),
}

/// One word of the policy: the bytes it occupies and its class.
#[derive(Debug, Clone)]
struct Slot {
    start: usize,
    end: usize,
    class: Class,
}

fn words(pairs: &'static [(&'static str, &'static str)]) -> Vec<&'static str> {
    pairs.iter().map(|(w, _)| *w).collect()
}

/// The slots of `text`, each word classified by the declaration of the
/// line's keyword.
fn slots(text: &str) -> Vec<Slot> {
    let revisions: Vec<&'static str> = ProtocolRevision::ALL.iter().map(|r| r.as_str()).collect();
    let mut out = Vec::new();
    let mut line_start = 0;
    for line in text.split_inclusive('\n') {
        let mut keyword: Option<&str> = None;
        let bytes = line.as_bytes();
        let mut i = 0;
        while i < line.len() {
            let c = bytes[i];
            if c == b'"' {
                i += 1;
                while i < line.len() && bytes[i] != b'"' {
                    i += 1;
                }
                i += 1;
                continue;
            }
            if c.is_ascii_alphanumeric() || c == b'_' || c == b'-' {
                let start = i;
                while i < line.len()
                    && (bytes[i].is_ascii_alphanumeric() || matches!(bytes[i], b'_' | b'.' | b'-'))
                {
                    i += 1;
                }
                let word = &line[start..i];
                let at = line_start + start;
                let first = keyword.is_none();
                if first {
                    keyword = Some(word);
                }
                if let Some(class) = classify(word, keyword.unwrap_or(word), first, &revisions) {
                    let (offset, class) = class;
                    out.push(Slot {
                        start: at + offset,
                        end: at + word.len(),
                        class,
                    });
                }
                // A value the declaration's words may replace (`ttl 60s`,
                // `ttl forever`).
                let values = REASON_PROPERTIES
                    .iter()
                    .find(|p| Some(p.doc.keyword) == keyword)
                    .map_or(&[][..], |p| p.values);
                if !first && !values.is_empty() && !values.iter().any(|(w, _)| *w == word) {
                    out.push(Slot {
                        start: at,
                        end: at + word.len(),
                        class: Class::Values(words(values)),
                    });
                }
                continue;
            }
            i += 1;
        }
        line_start += line.len();
    }
    out
}

/// The class of `word` on a line that starts with `keyword`, and where in
/// the word the slot starts (a unit joined to its number).
fn classify(
    word: &str,
    keyword: &str,
    first: bool,
    revisions: &[&'static str],
) -> Option<(usize, Class)> {
    if first {
        let known = statements::item_keywords()
            .chain(statements::policy_keywords())
            .chain(statements::reason_keywords())
            .any(|k| k == word);
        return known.then_some((0, Class::Name));
    }
    if revisions.contains(&word) {
        return Some((0, Class::Revision(revisions.to_vec())));
    }
    if CONNECTIVES.iter().any(|c| c.keyword == word) || IDENTITY_FIELDS.contains(&word) {
        return Some((0, Class::Name));
    }
    let statement = Statement::from_keyword(keyword).map(Statement::decl);
    let property = REASON_PROPERTIES.iter().find(|p| p.doc.keyword == keyword);
    let values = statement
        .map(|d| d.values)
        .or(property.map(|p| p.values))
        .unwrap_or(&[]);
    if values.iter().any(|(w, _)| *w == word) {
        return Some((0, Class::Values(words(values))));
    }
    if METRICS.iter().any(|(w, _)| *w == word) {
        return Some((0, Class::Values(words(METRICS))));
    }
    if CALENDAR_UNITS.contains(&word) {
        return Some((0, Class::Values(CALENDAR_UNITS.to_vec())));
    }
    if SIZE_UNITS.contains(&word) {
        return Some((0, Class::Units(SIZE_UNITS)));
    }
    let digits = word
        .char_indices()
        .find(|(at, c)| !(c.is_ascii_digit() || (*at == 0 && *c == '-')))
        .map_or(word.len(), |(at, _)| at);
    if digits == 0 {
        return None;
    }
    let suffix = &word[digits..];
    if DURATION_UNITS.contains(&suffix) {
        return Some((digits, Class::Units(DURATION_UNITS)));
    }
    // A bare count of a policy statement may take a suffix (`50k`).
    let counts = statement.is_some_and(|d| {
        matches!(
            d.shape,
            Shape::Quantity(statements::Unit::Count) | Shape::Rate | Shape::Budget
        )
    });
    if counts && (suffix.is_empty() || COUNT_SUFFIXES.contains(&suffix)) {
        return Some((digits, Class::Units(COUNT_SUFFIXES)));
    }
    None
}

/// One slip of the pen.
#[derive(Debug, Clone)]
enum Slip {
    Insert(usize, char),
    Delete(usize),
    Substitute(usize, char),
    Transpose(usize),
    Upper,
    Lower,
    Capitalise,
    FlipCase(usize),
    Suffix(&'static str),
    DropLast,
}

fn slip() -> impl Strategy<Value = Slip> {
    let letter = prop::sample::select(
        "abcdefghijklmnopqrstuvwxyzMKB"
            .chars()
            .collect::<Vec<char>>(),
    );
    prop_oneof![
        (any::<usize>(), letter.clone()).prop_map(|(at, c)| Slip::Insert(at, c)),
        any::<usize>().prop_map(Slip::Delete),
        (any::<usize>(), letter).prop_map(|(at, c)| Slip::Substitute(at, c)),
        any::<usize>().prop_map(Slip::Transpose),
        Just(Slip::Upper),
        Just(Slip::Lower),
        Just(Slip::Capitalise),
        any::<usize>().prop_map(Slip::FlipCase),
        prop::sample::select(vec!["s", "es", "ed", "ly", "d"]).prop_map(Slip::Suffix),
        Just(Slip::DropLast),
    ]
}

/// `word` with `slip` made in it.
fn misspell(word: &str, slip: &Slip) -> String {
    let mut chars: Vec<char> = word.chars().collect();
    let n = chars.len();
    match slip {
        Slip::Insert(at, c) => chars.insert(at % (n + 1), *c),
        Slip::Delete(at) if n > 0 => {
            chars.remove(at % n);
        }
        Slip::Substitute(at, c) if n > 0 => chars[at % n] = *c,
        Slip::Transpose(at) if n > 1 => chars.swap(at % (n - 1), at % (n - 1) + 1),
        Slip::Upper => return word.to_uppercase(),
        Slip::Lower => return word.to_lowercase(),
        Slip::Capitalise if n > 0 => chars[0] = chars[0].to_ascii_uppercase(),
        Slip::FlipCase(at) if n > 0 => {
            let c = chars[at % n];
            chars[at % n] = if c.is_ascii_uppercase() {
                c.to_ascii_lowercase()
            } else {
                c.to_ascii_uppercase()
            };
        }
        Slip::Suffix(s) => return format!("{word}{s}"),
        Slip::DropLast if n > 0 => {
            chars.pop();
        }
        _ => {}
    }
    chars.into_iter().collect()
}

fn splice(text: &str, slot: &Slot, word: &str) -> String {
    format!("{}{word}{}", &text[..slot.start], &text[slot.end..])
}

/// Checks one case; `Err` says what broke.
fn case(
    statement: usize,
    property: usize,
    slot: usize,
    alternative: usize,
    slip: &Slip,
) -> Result<(), String> {
    let statement = Statement::ALL[statement % Statement::ALL.len()]
        .decl()
        .example;
    let property = REASON_PROPERTIES[property % REASON_PROPERTIES.len()].example;
    let base = policy(statement, property);
    let all = slots(&base);
    let slot = &all[slot % all.len()];
    let alternatives: Vec<&str> = match &slot.class {
        Class::Name => vec![&base[slot.start..slot.end]],
        Class::Revision(words) | Class::Values(words) => words.clone(),
        Class::Units(units) => units.to_vec(),
    };
    let chosen = alternatives[alternative % alternatives.len()];
    let original = splice(&base, slot, chosen);
    let Some(table) = table_of(&original) else {
        // An alternative this line cannot take (`ttl until_reset` is fine,
        // others may not be): not an original.
        return Ok(());
    };
    if !fix_all(&original, findings).applied.is_empty() {
        return Ok(());
    }
    let written = misspell(chosen, slip);
    if written == chosen || written.is_empty() {
        return Ok(());
    }
    let text = splice(&base, slot, &written);
    let fixed = fix_all(&text, findings);
    if fixed.applied.is_empty() {
        return Ok(());
    }
    if let Class::Values(values) = &slot.class
        && !values.iter().any(|v| v.eq_ignore_ascii_case(&written))
    {
        return Err(format!(
            "`{written}` (from `{chosen}`) was certainly fixed to a value ({:?}):\n{}",
            fixed.applied, fixed.text
        ));
    }
    if let Some(after) = table_of(&fixed.text)
        && after != table
    {
        return Err(format!(
            "`{written}` (from `{chosen}`) was fixed ({:?}) into another meaning:\n{}",
            fixed.applied, fixed.text
        ));
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_certain_fix_keeps_the_meaning(
        statement in any::<usize>(),
        property in any::<usize>(),
        slot in any::<usize>(),
        alternative in any::<usize>(),
        slip in slip(),
    ) {
        case(statement, property, slot, alternative, &slip).map_err(TestCaseError::fail)?;
    }
}

/// Every statement and property yields a policy that compiles, and the
/// vocabulary found in it covers every declared value: the property above
/// reaches each of them.
#[test]
fn the_vocabulary_is_the_declarations() {
    let mut seen: Vec<&str> = Vec::new();
    for s in Statement::ALL {
        for p in REASON_PROPERTIES {
            let base = policy(s.decl().example, p.example);
            assert!(table_of(&base).is_some(), "{base}");
            for slot in slots(&base) {
                match slot.class {
                    Class::Values(v) | Class::Revision(v) => seen.extend(v),
                    Class::Units(u) => seen.extend(u),
                    Class::Name => {}
                }
            }
        }
    }
    let declared = Statement::ALL
        .iter()
        .flat_map(|s| words(s.decl().values))
        .chain(REASON_PROPERTIES.iter().flat_map(|p| words(p.values)))
        .chain(words(METRICS))
        .chain(CALENDAR_UNITS.iter().copied())
        .chain(DURATION_UNITS.iter().copied())
        .chain(SIZE_UNITS.iter().copied())
        .chain(COUNT_SUFFIXES.iter().copied());
    for word in declared {
        assert!(seen.contains(&word), "`{word}` is never reached");
    }
}

/// The findings of `text` with a certain fix, and every choice offered.
fn offers(text: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
    let found = findings(text);
    let fixes = found
        .iter()
        .filter_map(|d| d.fix.as_ref().map(|f| f.replacement.clone()))
        .collect();
    let choices = found
        .iter()
        .flat_map(|d| d.choices.iter().map(|f| f.replacement.clone()))
        .collect();
    let help = found.iter().filter_map(|d| d.help.clone()).collect();
    (fixes, choices, help)
}

#[test]
fn refusing_words_are_never_fixed_into_allowing_ones() {
    for statement in [
        "sampling no",
        "tools no",
        "sampling of",
        "sampling onf",
        "consent nevr",
    ] {
        let text = format!("mcpolicy 1\ndefaults {{\n  {statement}\n}}\n");
        let (fixes, choices, _) = offers(&text);
        assert!(fixes.is_empty(), "{statement}: {fixes:?}");
        assert!(!choices.is_empty(), "{statement}: offered nothing");
        assert!(fix_all(&text, findings).applied.is_empty(), "{statement}");
    }
    // `of` is one edit from `on` and from `off`: the help line says so.
    let (_, choices, help) = offers("mcpolicy 1\ndefaults {\n  sampling of\n}\n");
    assert_eq!(choices, ["off", "on"]);
    assert!(
        help[0].contains("`off`") && help[0].contains("`on`"),
        "{help:?}"
    );
    // A change of case is the value itself.
    let (fixes, _, _) = offers("mcpolicy 1\ndefaults {\n  sampling OFF\n}\n");
    assert_eq!(fixes, ["off"]);
}

#[test]
fn a_window_keeps_its_kind_and_a_unit_its_scale() {
    for (statement, wanted) in [
        ("budget 5 requests per days", vec!["day", "1d"]),
        ("budget 5 requests per hours", vec!["hour", "1h"]),
        ("budget 5 requests per weeks", vec!["week", "7d"]),
        ("budget 5 requests per 1w", vec!["7d", "week"]),
        // `w` is one letter from `s`, `m`, `h` and `d`: weeks are offered,
        // never applied (`60w` may be `60s` mistyped).
        ("budget 5 requests per 2w", vec!["14d"]),
        ("deadline 60w", vec!["420d"]),
        ("max_input 64 KB", vec!["KiB", "B"]),
        ("max_input 64", vec![" B", " KiB"]),
        ("deadline 5M", vec!["m"]),
        ("deadline 5S", vec!["s"]),
        ("max_tokens 5K", vec!["k"]),
        // One edit from `ms`, two (a plural) from `m`.
        ("deadline 10mes", vec!["ms"]),
    ] {
        let text = format!("mcpolicy 1\ndefaults {{\n  {statement}\n}}\n");
        let (fixes, choices, _) = offers(&text);
        assert!(fixes.is_empty(), "{statement}: {fixes:?}");
        assert_eq!(choices, wanted, "{statement}");
    }
    // Where no other kind or scale exists, the fix is certain.
    for (statement, fixed) in [
        ("rate 5 per days", "1d"),
        ("budget 5 requests per 2 weeks", "14d"),
        ("deadline 3wk", "21d"),
        ("deadline 5Ms", "ms"),
        ("max_input 64 kib", "KiB"),
    ] {
        let text = format!("mcpolicy 1\ndefaults {{\n  {statement}\n}}\n");
        let (fixes, _, _) = offers(&text);
        assert_eq!(fixes, [fixed], "{statement}");
    }
}
