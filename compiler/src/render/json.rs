//! Machine-readable findings: one JSON document for all files.

use serde_json::{Value, json};

use super::{FileReport, totals};
use crate::diagnostic::Diagnostic;
use crate::line_index::LineIndex;
use crate::syntax::Span;

fn location(text: &str, index: &LineIndex, span: Span) -> Value {
    let start = index.position(text, span.start);
    let end = index.position(text, span.end);
    json!({
        "line": start.line,
        "column": start.column,
        "end_line": end.line,
        "end_column": end.column,
        "byte_start": span.start,
        "byte_end": span.end,
    })
}

pub(super) fn diagnostic_json(path: &str, text: &str, index: &LineIndex, d: &Diagnostic) -> Value {
    let mut value = json!({
        "code": d.code.as_str(),
        "severity": d.severity().as_str(),
        "message": d.message,
        "file": path,
        "label": d.label,
        "help": d.help,
        "note": d.note,
    });
    if let (Value::Object(map), Value::Object(loc)) = (&mut value, location(text, index, d.span)) {
        map.extend(loc);
        map.insert(
            "related".into(),
            d.related
                .iter()
                .map(|r| {
                    let mut v = location(text, index, r.span);
                    if let Value::Object(m) = &mut v {
                        m.insert("message".into(), r.message.clone().into());
                    }
                    v
                })
                .collect(),
        );
        map.insert(
            "fix".into(),
            d.fix.as_ref().map_or(Value::Null, |f| {
                json!({ "title": f.title, "byte_start": f.span.start, "byte_end": f.span.end, "replacement": f.replacement })
            }),
        );
        map.insert(
            "choices".into(),
            d.choices
                .iter()
                .map(|f| json!({ "title": f.title, "byte_start": f.span.start, "byte_end": f.span.end, "replacement": f.replacement }))
                .collect(),
        );
    }
    value
}

/// `{"version":1,"diagnostics":[…],"summary":{…}}`; columns count Unicode
/// scalar values from 1, byte offsets from 0.
pub fn json(reports: &[FileReport]) -> String {
    let (errors, warnings) = totals(reports);
    let doc = json!({
        "version": 1,
        "files": reports.iter().map(|r| r.path.as_str()).collect::<Vec<_>>(),
        "diagnostics": super::ITEMS_MARKER,
        "summary": { "errors": errors, "warnings": warnings },
    });
    let items = reports.iter().flat_map(|report| {
        let index = LineIndex::new(&report.text);
        report
            .diagnostics
            .iter()
            .map(move |d| diagnostic_json(&report.path, &report.text, &index, d))
    });
    super::pretty_with_items(&doc, items)
}
