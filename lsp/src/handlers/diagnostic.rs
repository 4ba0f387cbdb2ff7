//! `textDocument/diagnostic`: pull diagnostics, with result ids.
//!
//! A client that declares the `textDocument.diagnostic` capability pulls
//! and the server stops pushing (`main_loop.rs`), as it would otherwise see
//! every finding twice. The result id is a fingerprint of the report's
//! content, not of the document's version: an edit that changes no finding
//! (typing inside a block far from the findings of a file with thousands)
//! is answered `unchanged`, and the client keeps what it shows. The id
//! includes the settings the findings were made under (`crate::settings`),
//! so that after a settings change the next pull is answered in full.

use std::hash::{DefaultHasher, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};

use lsp_types::{
    DocumentDiagnosticParams, DocumentDiagnosticReport, DocumentDiagnosticReportResult,
    FullDocumentDiagnosticReport, RelatedFullDocumentDiagnosticReport,
    RelatedUnchangedDocumentDiagnosticReport, UnchangedDocumentDiagnosticReport,
};

use super::Result;
use crate::world::World;

/// The document's findings, or `unchanged` when they are the ones the
/// client's `previousResultId` stands for.
pub fn handle(
    world: &World,
    params: DocumentDiagnosticParams,
) -> Result<DocumentDiagnosticReportResult> {
    let snapshot = world.snapshot(&params.text_document.uri)?;
    // A crash in the checker is said as a finding, never as none (as for
    // pushed diagnostics); the panic itself went to stderr.
    let items = catch_unwind(AssertUnwindSafe(|| crate::diagnostics::all(&snapshot)))
        .unwrap_or_else(|payload| {
            let why = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            vec![crate::diagnostics::crashed(&why)]
        });
    let result_id = fingerprint(&crate::settings::fingerprint(snapshot.db), &items);
    let report = if params.previous_result_id.as_deref() == Some(result_id.as_str()) {
        DocumentDiagnosticReport::Unchanged(RelatedUnchangedDocumentDiagnosticReport {
            related_documents: None,
            unchanged_document_diagnostic_report: UnchangedDocumentDiagnosticReport { result_id },
        })
    } else {
        DocumentDiagnosticReport::Full(RelatedFullDocumentDiagnosticReport {
            related_documents: None,
            full_document_diagnostic_report: FullDocumentDiagnosticReport {
                result_id: Some(result_id),
                items,
            },
        })
    };
    Ok(DocumentDiagnosticReportResult::Report(report))
}

/// A fingerprint of the findings as the client receives them (their JSON),
/// so that any difference in any field gives another id, and of the
/// `settings` they were made under.
fn fingerprint(settings: &str, items: &[lsp_types::Diagnostic]) -> String {
    struct HashWriter(DefaultHasher);
    impl std::io::Write for HashWriter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.write(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut writer = HashWriter(DefaultHasher::new());
    writer.0.write(settings.as_bytes());
    // Writing to a hasher cannot fail; serialising these types does not.
    let _ = serde_json::to_writer(&mut writer, items);
    format!("{:016x}-{}", writer.0.finish(), items.len())
}
