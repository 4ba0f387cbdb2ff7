//! The compiler's diagnostics as LSP diagnostics: the same code, message,
//! help, note and related locations as `mcpc check`.

use lsp_types::{
    Diagnostic as LspDiagnostic, DiagnosticRelatedInformation, DiagnosticSeverity, Location,
    NumberOrString,
};
use mcpolicy_compiler::codes::Severity;
use mcpolicy_compiler::diagnostic::Diagnostic;
use mcpolicy_compiler::ide::settings::{self, deny_warnings};
use salsa::Database as _;

use crate::code_docs::CodesPage;
use crate::world::Snapshot;

/// The code of the diagnostic that stands for a checker crash.
pub const CRASHED_CODE: &str = "checker-crashed";
/// The source of that diagnostic: the server, not the policy's checker
/// (whose findings have source `mcpolicy`).
pub const CRASHED_SOURCE: &str = "mcpolicy-lsp";

/// The one diagnostic of a document whose check panicked, at its start: a
/// crash must not look like a clean file. `why` is the panic's message and
/// location, also in the server's log.
pub fn crashed(why: &str) -> LspDiagnostic {
    LspDiagnostic {
        range: lsp_types::Range::default(),
        severity: Some(DiagnosticSeverity::ERROR),
        code: Some(NumberOrString::String(CRASHED_CODE.to_owned())),
        source: Some(CRASHED_SOURCE.to_owned()),
        message: format!(
            "the checker crashed on this file, so its findings are not shown; \
             this is a bug in mcpolicy-lsp, not in the policy. \
             The panic is in the language server's log \
             (the editor's output for mcpolicy-lsp, and its stderr); \
             editing the file checks it again.\n{why}"
        ),
        ..LspDiagnostic::default()
    }
}

/// One finding, converted.
pub fn to_lsp(snapshot: &Snapshot<'_>, d: &Diagnostic) -> LspDiagnostic {
    convert(snapshot, &crate::code_docs::page(snapshot.db), d)
}

/// [`to_lsp`] with the page its code links into.
fn convert(snapshot: &Snapshot<'_>, page: &CodesPage, d: &Diagnostic) -> LspDiagnostic {
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
            Severity::Warning if deny_warnings(snapshot.db) => DiagnosticSeverity::ERROR,
            Severity::Warning => DiagnosticSeverity::WARNING,
        }),
        code: Some(NumberOrString::String(d.code.as_str().to_owned())),
        code_description: page.description(d.code),
        tags: crate::code_docs::tags(d.code),
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
    crate::fault::inject(snapshot.text(), "the check");
    let page = crate::code_docs::page(snapshot.db);
    settings::diagnostics(snapshot.db, snapshot.document.source)
        .iter()
        .enumerate()
        .map(|(i, d)| {
            if i % 256 == 255 {
                snapshot.db.unwind_if_revision_cancelled();
            }
            convert(snapshot, &page, d)
        })
        .collect()
}
