//! What each keyword, value and unit means, for hovers and completion. The
//! keywords' documentation is declared with the statements (`statements.rs`).

use crate::statements::{self, CONNECTIVES, ITEMS, REASON_PROPERTIES, Statement};

pub use crate::statements::{
    CALENDAR_UNITS, COUNT_SUFFIXES, DURATION_UNITS, KeywordDoc, SIZE_UNITS,
};

/// The documentation of any keyword.
pub fn keyword(word: &str) -> Option<&'static KeywordDoc> {
    Statement::ALL
        .iter()
        .map(|s| &s.decl().doc)
        .chain(REASON_PROPERTIES.iter().map(|p| &p.doc))
        .chain(ITEMS)
        .chain(CONNECTIVES)
        .find(|d| d.keyword == word)
}

/// The documentation of a connecting word (`per`, `as`).
pub fn connective(word: &str) -> Option<&'static KeywordDoc> {
    CONNECTIVES.iter().find(|d| d.keyword == word)
}

/// A unit's meaning and its factor in the base unit (milliseconds, bytes, or ones).
pub fn unit(unit: &str) -> Option<(&'static str, u64)> {
    Some(match unit {
        "ms" => ("milliseconds", 1),
        "s" => ("seconds", 1_000),
        "m" => ("minutes", 60_000),
        "h" => ("hours", 3_600_000),
        "d" => ("days", 86_400_000),
        "B" => ("bytes", 1),
        "KiB" => ("kibibytes (1,024 bytes)", 1 << 10),
        "MiB" => ("mebibytes (1,048,576 bytes)", 1 << 20),
        "GiB" => ("gibibytes (1,073,741,824 bytes)", 1 << 30),
        "k" => ("thousand", 1_000),
        "M" => ("million", 1_000_000),
        _ => return None,
    })
}

/// The values an enumerated statement or property takes, each with its
/// meaning; also `metric` and `calendar`, the words of a budget.
pub fn values(name: &str) -> &'static [(&'static str, &'static str)] {
    if let Some(statement) = Statement::from_keyword(name) {
        return statement.decl().values;
    }
    if let Some(property) = REASON_PROPERTIES.iter().find(|p| p.doc.keyword == name) {
        return property.values;
    }
    match name {
        "metric" => statements::METRICS,
        "calendar" => statements::CALENDAR,
        _ => &[],
    }
}

/// The anchor of a code's section in `docs/codes.md`: `e0101`. Each section
/// declares it with an explicit `<a id>`, so it is the same whatever the
/// Markdown renderer makes of the heading.
pub fn code_anchor(code: crate::codes::Code) -> String {
    code.as_str().to_ascii_lowercase()
}

/// `docs/codes.md`: one section per code, in table order, each with a
/// stable anchor ([`code_anchor`]) and the text `mcpc explain CODE` prints.
/// Generated from `codes.rs`; a test (`lsp/tests/code_docs.rs`) keeps the
/// file equal to this (`UPDATE_EXPECT=1` rewrites it).
pub fn codes_markdown() -> String {
    use crate::codes::Code;
    let mut md = String::from(
        "<!-- Generated from compiler/src/codes.rs by `UPDATE_EXPECT=1 cargo test -p mcpolicy-lsp --test code_docs`; do not edit. -->\n\
         # Diagnostic codes\n\n\
         Every finding of `mcpc check` and of the language server carries one of these\n\
         codes. Each section is the text `mcpc explain CODE` prints; the language\n\
         server links each diagnostic here (`codeDescription`) once its `codeDocsUrl`\n\
         setting names where this page is published.\n\n",
    );
    for code in Code::ALL {
        md.push_str(&format!(
            "- [{code}](#{}) ({}): {}\n",
            code_anchor(*code),
            code.severity().as_str(),
            code.summary()
        ));
    }
    for code in Code::ALL {
        md.push_str(&format!(
            "\n<a id=\"{}\"></a>\n\n## {code}\n\n```text\n{code} ({}): {}\n\n{}\n```\n",
            code_anchor(*code),
            code.severity().as_str(),
            code.summary(),
            code.explanation()
        ));
    }
    md
}
