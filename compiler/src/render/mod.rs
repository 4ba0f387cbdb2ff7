//! Diagnostics out: human (miette), JSON, SARIF 2.1.0 and GitHub annotations.
//! The same `Diagnostic` values feed every format, so codes never differ.

pub mod columns;
mod github;
mod human;
mod json;
mod sarif;

pub use github::github;
pub use human::{Style, human};
pub use json::json;
pub use sarif::sarif;

use serde_json::Value;

use crate::codes::Severity;
use crate::diagnostic::Diagnostic;

/// One checked file and what was found in it.
#[derive(Debug, Clone)]
pub struct FileReport {
    /// The path as the user gave it (`<stdin>` for `-`).
    pub path: String,
    /// The text (lossily decoded when the file is not UTF-8).
    pub text: String,
    /// The findings, in source order.
    pub diagnostics: Vec<Diagnostic>,
}

impl FileReport {
    /// Errors and warnings, counted.
    pub fn counts(&self) -> (usize, usize) {
        let errors = self
            .diagnostics
            .iter()
            .filter(|d| d.severity() == Severity::Error)
            .count();
        (errors, self.diagnostics.len() - errors)
    }
}

/// Errors and warnings over every file.
pub fn totals(reports: &[FileReport]) -> (usize, usize) {
    reports
        .iter()
        .map(FileReport::counts)
        .fold((0, 0), |(e, w), (fe, fw)| (e + fe, w + fw))
}

/// Stands in a document for the one array written item by item.
const ITEMS_MARKER: &str = "@@mcpc-items@@";

/// `doc` pretty-printed, with the string [`ITEMS_MARKER`] in it replaced by a
/// pretty-printed array of `items`, each item built and printed on its own.
///
/// The bytes equal `to_string_pretty` of the whole document, but only one
/// item's tree is alive at a time: 50,000 findings do not become one
/// `Value` of half a gigabyte.
fn pretty_with_items(doc: &Value, items: impl Iterator<Item = Value>) -> String {
    let text = serde_json::to_string_pretty(doc).unwrap_or_else(|_| "{}".to_owned());
    let marker = format!("\"{ITEMS_MARKER}\"");
    let Some(at) = text.find(&marker) else {
        return text + "\n";
    };
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let indent = " ".repeat(text[line_start..at].len() - text[line_start..at].trim_start().len());
    let mut out = String::with_capacity(text.len());
    out.push_str(&text[..at]);
    let mut first = true;
    for item in items {
        out.push_str(if first { "[\n" } else { ",\n" });
        first = false;
        let printed = serde_json::to_string_pretty(&item).unwrap_or_else(|_| "{}".to_owned());
        for (i, line) in printed.lines().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.push_str(&indent);
            out.push_str("  ");
            out.push_str(line);
        }
    }
    if first {
        out.push_str("[]");
    } else {
        out.push('\n');
        out.push_str(&indent);
        out.push(']');
    }
    out.push_str(&text[at + marker.len()..]);
    out.push('\n');
    out
}
