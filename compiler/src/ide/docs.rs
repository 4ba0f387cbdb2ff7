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
