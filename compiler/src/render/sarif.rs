//! SARIF 2.1.0, as GitHub code scanning accepts it: every code is a rule
//! with its help text, every finding a result with a physical location.

use serde_json::{Value, json};

use super::FileReport;
use crate::codes::{Code, Severity};
use crate::line_index::LineIndex;
use crate::syntax::Span;

fn level(severity: Severity) -> &'static str {
    match severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
    }
}

fn uri(path: &str) -> String {
    let path = path.replace('\\', "/");
    path.strip_prefix("./").unwrap_or(&path).to_owned()
}

fn region(text: &str, index: &LineIndex, span: Span) -> Value {
    let start = index.position(text, span.start);
    let end = index.position(text, span.end);
    json!({
        "startLine": start.line,
        "startColumn": start.column_utf16,
        "endLine": end.line,
        "endColumn": end.column_utf16,
        "byteOffset": span.start,
        "byteLength": span.len(),
    })
}

/// The SARIF log for every report.
pub fn sarif(reports: &[FileReport]) -> String {
    let rules: Vec<Value> = Code::ALL
        .iter()
        .map(|code| {
            json!({
                "id": code.as_str(),
                "shortDescription": { "text": code.summary() },
                "fullDescription": { "text": code.explanation() },
                "help": { "text": code.explanation(), "markdown": format!("**{}**: {}\n\n```\n{}\n```", code.as_str(), code.summary(), code.explanation()) },
                "defaultConfiguration": { "level": level(code.severity()) },
                "properties": { "tags": ["mcpolicy"] },
            })
        })
        .collect();
    let results = reports.iter().flat_map(|report| {
        let index = LineIndex::new(&report.text);
        let artifact = json!({ "uri": uri(&report.path) });
        report.diagnostics.iter().map(move |d| {
            let rule_index = Code::ALL.iter().position(|c| *c == d.code).unwrap_or(0);
            let mut text = d.message.clone();
            if let Some(help) = &d.help {
                text.push_str("\nhelp: ");
                text.push_str(help);
            }
            let related: Vec<Value> = d
                .related
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    json!({
                        "id": i,
                        "message": { "text": r.message },
                        "physicalLocation": { "artifactLocation": artifact, "region": region(&report.text, &index, r.span) },
                    })
                })
                .collect();
            let mut result = json!({
                "ruleId": d.code.as_str(),
                "ruleIndex": rule_index,
                "level": level(d.severity()),
                "message": { "text": text },
                "locations": [{
                    "physicalLocation": { "artifactLocation": artifact, "region": region(&report.text, &index, d.span) },
                }],
            });
            if !related.is_empty() {
                result["relatedLocations"] = Value::Array(related);
            }
            if let Some(fix) = &d.fix {
                result["fixes"] = json!([{
                    "description": { "text": fix.title },
                    "artifactChanges": [{
                        "artifactLocation": artifact,
                        "replacements": [{
                            "deletedRegion": { "byteOffset": fix.span.start, "byteLength": fix.span.len() },
                            "insertedContent": { "text": fix.replacement },
                        }],
                    }],
                }]);
            }
            result
        })
    });
    let log = json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": {
                "name": "mcpc",
                "semanticVersion": env!("CARGO_PKG_VERSION"),
                "informationUri": "https://github.com/mcpolicy/mcpolicy",
                "rules": rules,
            }},
            "columnKind": "utf16CodeUnits",
            "results": super::ITEMS_MARKER,
        }],
    });
    super::pretty_with_items(&log, results)
}
