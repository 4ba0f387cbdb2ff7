//! `textDocument/documentHighlight`: a reason's declaration and uses, or a
//! statement in every block.

use lsp_types::{DocumentHighlight, DocumentHighlightKind, DocumentHighlightParams};
use mcpolicy_compiler::ide;

use super::Result;
use crate::world::World;

/// The highlights for the cursor; a declaration is `Write`, a use `Read`,
/// a statement keyword `Text`.
pub fn handle(
    world: &World,
    params: DocumentHighlightParams,
) -> Result<Option<Vec<DocumentHighlight>>> {
    let at = params.text_document_position_params;
    let snapshot = world.snapshot(&at.text_document.uri)?;
    let offset = snapshot.offset(at.position);
    let index = ide::symbol_index(snapshot.db, snapshot.document.source);
    let reason = index.reason_at(offset).is_some();
    let highlights: Vec<DocumentHighlight> =
        ide::highlights(snapshot.db, snapshot.document.source, offset)
            .into_iter()
            .map(|h| DocumentHighlight {
                range: snapshot.range(h.span),
                kind: Some(match (reason, h.declaration) {
                    (true, true) => DocumentHighlightKind::WRITE,
                    (true, false) => DocumentHighlightKind::READ,
                    (false, _) => DocumentHighlightKind::TEXT,
                }),
            })
            .collect();
    Ok((!highlights.is_empty()).then_some(highlights))
}
