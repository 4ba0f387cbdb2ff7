//! GitHub Actions workflow commands: `::error file=…,line=…::message`.

use super::FileReport;
use crate::codes::Severity;
use crate::line_index::LineIndex;

fn escape_data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

fn escape_property(text: &str) -> String {
    escape_data(text).replace(':', "%3A").replace(',', "%2C")
}

/// One annotation line per finding.
pub fn github(reports: &[FileReport]) -> String {
    let mut out = String::new();
    for report in reports {
        let index = LineIndex::new(&report.text);
        for d in &report.diagnostics {
            let start = index.position(&report.text, d.span.start);
            let end = index.position(&report.text, d.span.end);
            let command = match d.severity() {
                Severity::Error => "error",
                Severity::Warning => "warning",
            };
            let mut message = d.message.clone();
            if let Some(help) = &d.help {
                message.push_str("\nhelp: ");
                message.push_str(help);
            }
            out.push_str(&format!(
                "::{command} file={},line={},col={},endLine={},endColumn={},title={}::{}\n",
                escape_property(&report.path),
                start.line,
                start.column,
                end.line,
                end.column,
                escape_property(&format!("{} {}", d.code, d.code.summary())),
                escape_data(&message),
            ));
        }
    }
    out
}
