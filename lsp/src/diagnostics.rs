//! The compiler's diagnostics as LSP diagnostics: the same code, message,
//! help, note and related locations as `mcpc check`.

use lsp_types::{
    Diagnostic as LspDiagnostic, DiagnosticRelatedInformation, DiagnosticSeverity, Location,
    NumberOrString,
};
use mcpolicy_compiler::codes::Severity;
use mcpolicy_compiler::diagnostic::Diagnostic;
use salsa::Database as _;

use crate::world::Snapshot;

/// One finding, converted.
pub fn to_lsp(snapshot: &Snapshot<'_>, d: &Diagnostic) -> LspDiagnostic {
    let mut message = d.message.clone();
    if let Some(help) = &d.help {
        message.push_str(&format!("\nhelp: {help}"));
    }
    if let Some(note) = &d.note {
        message.push_str(&format!("\nnote: {note}"));
    }
    let related: Vec<DiagnosticRelatedInformation> = d
        .related
        .iter()
        .map(|r| DiagnosticRelatedInformation {
            location: Location {
                uri: snapshot.document.uri.clone(),
                range: snapshot.range(r.span),
            },
            message: r.message.clone(),
        })
        .collect();
    LspDiagnostic {
        range: snapshot.range(d.span),
        severity: Some(match d.severity() {
            Severity::Error => DiagnosticSeverity::ERROR,
            Severity::Warning => DiagnosticSeverity::WARNING,
        }),
        code: Some(NumberOrString::String(d.code.as_str().to_owned())),
        source: Some("mcpolicy".to_owned()),
        message,
        related_information: (!related.is_empty()).then_some(related),
        ..LspDiagnostic::default()
    }
}

/// Every finding of the document. On a worker's clone of the database this
/// unwinds with `salsa::Cancelled` as soon as a newer edit is waiting, also
/// between conversions (a 10 MB file can have many findings).
pub fn all(snapshot: &Snapshot<'_>) -> Vec<LspDiagnostic> {
    mcpolicy_compiler::db::diagnostics(snapshot.db, snapshot.document.source)
        .iter()
        .enumerate()
        .map(|(i, d)| {
            if i % 256 == 255 {
                snapshot.db.unwind_if_revision_cancelled();
            }
            to_lsp(snapshot, d)
        })
        .collect()
}
